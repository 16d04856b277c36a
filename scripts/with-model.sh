#!/usr/bin/env bash
# with-model.sh CMD...: runs the model's searches (model/check.sh) in the
# background at the lowest CPU priority while CMD runs, then prints their
# output; it fails when either failed. The Go tests leave a core or more
# idle most of the time (the chaos suite and the integration tests wait on
# Docker, timers and the network), and the searches are CPU-bound, so on
# two cores the pair takes little longer than the longer of the two. With
# nice 19 the tests keep the CPU they ask for.
set -uo pipefail
cd "$(dirname "$0")/.."
./scripts/ensure-deb.sh spin spin || exit 1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
nice -n 19 ./model/check.sh > "$log" 2>&1 &
model=$!
echo "with-model: model/check.sh runs in the background (nice 19); its output follows the tests'"
"$@"
rc=$?
echo "with-model: the tests ended after $(( $(date +%s) - start )) s (exit $rc); waiting for the model"
wait "$model"
mrc=$?
echo "--- model/check.sh, in the background since the start, ended after $(( $(date +%s) - start )) s (exit $mrc):"
cat "$log"
[ "$rc" = 0 ] && [ "$mrc" = 0 ]
