#!/usr/bin/env bash
# check.sh: checks the model (redlock.pml, and layer.pml for the limit
# layer) with spin, every property and every negative control; see
# docs/SAFETY.md. Every run is an exhaustive
# search, never bitstate. A property is checked depth-first with a depth
# bound far above the depth reached (a truncated search, which pan reports
# as "max search depth too small", fails the run, as does one that hits
# its memory limit) and passes when it finds no error. A control is
# searched breadth-first, for a short counterexample (depth-first where
# the table says dfs), and passes when it
# finds the error it was built for; its trail is replayed to count the
# counterexample's events. A liveness run ("live" in the last column) is
# a depth-first search for acceptance cycles under weak fairness (pan -a
# -f) against the model's ltl formula; its control must end with an
# acceptance cycle. A const-NAME run keeps the variables that NAME hides
# and checks that they never change (constant.pml); it must store as
# many states as NAME. The runs go two at a time (MODEL_JOBS), the
# longest first.
# Usage: model/check.sh [name ...]   (default: every run but the EXTRA ones)
# MODEL_MEM_MB bounds each run's memory (default 6000); MODEL_COLLAPSE=1
# compresses the stored states of the properties' runs (slower, smaller).
set -euo pipefail
cd "$(dirname "$0")"
command -v spin >/dev/null || { echo "check.sh: spin is not installed (apt-get install spin)" >&2; exit 2; }
MEM=${MODEL_MEM_MB:-6000}
DEPTH=200000
LDEPTH=2000000   # a liveness search goes round the rounds: a deeper stack

# name | defines | expect: ok, or the text of the assertion the control
# breaks | search for a control: bfs (default, the shortest
# counterexample), dfs (one that is deep in a large space) or live |
# model file (default redlock.pml)
RUNS='
mutex|-DT=2|ok
mutex-delayed|-DT=2 -DDELAYED|ok
crash-delayed|-DT=2 -DCRASH -DDELAYED|ok
fence|-DT=2 -DFENCING|ok
crash|-DT=2 -DCRASH -DIDCHANGE -DKILL|ok
failover|-DT=2 -DFAILOVER -DREPROMOTE -DIDCHANGE|ok
extend|-DT=2 -DEXTEND -DLOCKOUT|ok
timeouts|-DT=2 -DTIMEOUTS -DLOCKOUT|ok
loss|-DT=2 -DLOSS -DLOCKOUT|ok
lockout|-DT=2 -DLOCKOUT -DIDCHANGE -DKILL|ok
fresh|-DT=2 -DFRESH -DLOCKOUT -DR=3 -DATT=1|ok
replid|-DT=2 -DNEWCLIENT -DCRASH -DFAULTY_FROM=1 -DFAULTS=2 -DIDCHANGE -DR=3 -DATT=1|ok
fence-loss|-DT=2 -DFENCING -DNEWCLIENT -DTOTALLOSS -DNOEXCLUSIVE -DR=3 -DATT=1|ok
fence-crash|-DT=2 -DFENCING -DCRASH|ok
fence-failover|-DT=2 -DFENCING -DFAILOVER|ok
extend-crash|-DT=2 -DEXTEND -DCRASH|ok
fresh-crash|-DT=2 -DFRESH -DCRASH -DR=3 -DATT=1|ok
ctl-nomark|-DT=2 -DFRESH -DCRASH -DNOMARK -DR=2 -DATT=1|exclusive|dfs
ctl-minority|-DT=2 -DMINORITY|exclusive
ctl-nodrift|-DT=2 -DNODRIFT|exclusive
ctl-noguard|-DT=2 -DNOGUARD -DCRASH|exclusive
ctl-nocheck|-DT=2 -DNOCHECK -DFAILOVER|exclusive
ctl-nowriteback|-DT=2 -DFENCING -DNOWRITEBACK -DCRASH|fence
ctl-notomb|-DT=2 -DORPHAN -DNOTOMB|orphan
ctl-onetomb|-DT=2 -DORPHAN -DONETOMB|orphan
ctl-lockout|-DT=2 -DLOCKOUT -DCRASH|lockout
ctl-idlockout|-DT=2 -DLOCKOUT -DIDCHANGE -DOLDCHECK|lockout
ctl-backlog|-DT=2 -DFAILOVER -DREPROMOTE -DIDCHANGE -DIDNOW|exclusive
ctl-replid|-DT=2 -DNEWCLIENT -DCRASH -DFAULTY_FROM=1 -DFAULTS=2 -DIDCHANGE -DOLDCHECK -DR=3 -DATT=1|exclusive|dfs
ctl-seedzero|-DT=2 -DFENCING -DNEWCLIENT -DTOTALLOSS -DNOEXCLUSIVE -DSEEDZERO -DR=3 -DATT=1|order|dfs
ctl-handnow|-DT=2 -DHANDOFF -DHANDNOW -DC=3 -DLATE3|exclusive|dfs
ctl-handsym|-DT=2 -DHANDOFF -DHANDNOW -DC=3 -DLATE3 -DSYMMETRY|exclusive|dfs
orphan|-DT=2 -DORPHAN|ok
pipe|-DT=2 -DPIPE -DCRASH|ok
pipe-kill|-DT=2 -DPIPE -DCRASH -DIDCHANGE -DKILL|ok
pipe-failover|-DT=2 -DPIPE -DFAILOVER -DREPROMOTE -DIDCHANGE|ok
pipe-delayed|-DT=2 -DPIPE -DCRASH -DDELAYED|ok
pipe-loss|-DT=2 -DPIPE -DLOSS -DLOCKOUT|ok
pipe-orphan|-DT=2 -DPIPE -DORPHAN|ok
pipe-timeouts|-DT=2 -DPIPE -DTIMEOUTS -DCRASH|ok
ctl-noread|-DT=2 -DPIPE -DNOREAD -DCRASH|exclusive
ctl-readfirst|-DT=2 -DPIPE -DREADFIRST -DCRASH|exclusive
live|-DT=2 -DLIVE -DLOCKOUT|ok|live
ctl-live|-DT=2 -DLIVE -DNOCLEANUP|live|live
failover-delayed|-DT=2 -DFAILOVER -DDELAYED|ok
fresh-id|-DT=2 -DFRESH -DLOCKOUT -DIDCHANGE -DR=3 -DATT=1|ok
fresh-kill|-DT=2 -DFRESH -DLOCKOUT -DKILL -DR=3 -DATT=1|ok
failover-kill|-DT=2 -DFAILOVER -DREPROMOTE -DIDCHANGE -DKILL|ok
handoff|-DT=2 -DHANDOFF -DC=3 -DSYMMETRY|ok
handoff2|-DT=2 -DHANDOFF -DC=2 -DSYMMETRY|ok
pipejoin|-DT=2 -DHANDOFF -DPIPEJOIN -DC=2 -DSYMMETRY|ok
pipejoin-crash|-DT=2 -DHANDOFF -DPIPEJOIN -DC=2 -DCRASH|ok
ctl-joingrant|-DT=2 -DHANDOFF -DPIPEJOIN -DJOINGRANT -DC=2 -DCRASH|exclusive
mutex5|-DT=2 -DN=5 -DSYMMETRY|ok
loss5|-DT=2 -DN=5 -DLOSS -DSYMMETRY|ok
timeouts5|-DT=2 -DN=5 -DTIMEOUTS -DSYMMETRY|ok
ctl-minority5|-DT=2 -DN=5 -DMINORITY -DSYMMETRY|exclusive|dfs
ctl-nodrift5|-DT=2 -DN=5 -DNODRIFT -DSYMMETRY|exclusive|dfs
const-mutex|-DT=2 -DKEEPALL -DCONSTCHECK|ok
const-crash|-DT=2 -DCRASH -DIDCHANGE -DKILL -DKEEPALL -DCONSTCHECK|ok
const-failover|-DT=2 -DFAILOVER -DREPROMOTE -DIDCHANGE -DKEEPALL -DCONSTCHECK|ok
const-fence|-DT=2 -DFENCING -DKEEPALL -DCONSTCHECK|ok
const-extend|-DT=2 -DEXTEND -DLOCKOUT -DKEEPALL -DCONSTCHECK|ok
const-timeouts|-DT=2 -DTIMEOUTS -DLOCKOUT -DKEEPALL -DCONSTCHECK|ok
const-loss|-DT=2 -DLOSS -DLOCKOUT -DKEEPALL -DCONSTCHECK|ok
const-orphan|-DT=2 -DORPHAN -DKEEPALL -DCONSTCHECK|ok
const-handoff2|-DT=2 -DHANDOFF -DC=2 -DSYMMETRY -DKEEPALL -DCONSTCHECK|ok
layer-sem|-DC=3 -DSPLIT=1|ok||layer.pml
layer-limit|-DC=2 -DMISMATCH -DCRASH|ok||layer.pml
layer-rw|-DC=2 -DRW -DCRASH|ok||layer.pml
layer-rw3|-DC=3 -DRW -DSPLIT=1|ok||layer.pml
layer-rw-extend|-DC=2 -DRW -DEXTEND -DCRASH|ok||layer.pml
layer-limit-extend|-DC=2 -DMISMATCH -DEXTEND -DCRASH|ok||layer.pml
ctl-naive|-DC=3 -DNAIVE -DONETICK|bound||layer.pml
ctl-norec|-DC=2 -DMISMATCH -DNOREC|bound||layer.pml
ctl-nowcheck|-DC=2 -DRW -DNOWCHECK|rw||layer.pml
ctl-norcheck|-DC=2 -DRW -DNORCHECK|rw||layer.pml
ctl-earlyrec|-DC=2 -DRW -DEARLYREC|rw||layer.pml
layer-sem-all|-DC=3 -DCRASH|ok||layer.pml
layer-rw3-all|-DC=3 -DRW -DCRASH|ok||layer.pml
layer-late|-DC=3 -DSPLIT=1 -DLATE|ok||layer.pml
'
# Runs beyond the time or the memory of `make model`, run by name only
# with a larger MODEL_MEM_MB (docs/SAFETY.md): handoff (3 clients, 58
# million states, 9.4 GB), fresh-crash (43 million, 7.8 GB),
# failover-delayed (37 million, 6.5 GB), fence-failover (36 million,
# 7.5 GB), timeouts5 (5 nodes, 16 million states, 2.8 GB, 82 s), and the
# new deployment and the failover with the ID change or the connection
# drop: fresh-id, fresh-kill and failover-kill (each beyond 6 GB), and
# const-failover (failover's 9 million states, with every variable kept
# and checked at each step).
# The pipelined join's runs (make model keeps their control,
# ctl-joingrant): pipejoin (40 million states, 6 GB, about 10 minutes)
# and pipejoin-crash (37 million states, 7.9 GB with MODEL_COLLAPSE=1).
# The pipelined acquire's runs beyond pipe and pipe-orphan: pipe-kill
# and pipe-failover beyond 6 GB (MODEL_COLLAPSE=1), pipe-loss,
# pipe-delayed and pipe-timeouts for the time.
# Also by name, to keep make model's time: runs that another run of make
# model covers (a fault may not happen: crash-delayed covers
# mutex-delayed, which stays; fence-crash covers fence; loss5 covers
# mutex5), three const-* runs (const-fence, const-extend, const-timeouts:
# make model keeps those of mutex, crash, loss, orphan and handoff2), and
# the longest controls whose property another control of make model also
# breaks (ctl-nomark beside ctl-replid; ctl-minority5 beside ctl-minority).
EXTRA=" pipejoin pipejoin-crash pipe-loss pipe-failover pipe-delayed pipe-timeouts pipe-kill failover-delayed handoff fence-failover fresh-crash timeouts5 fresh-id fresh-kill failover-kill const-failover crash-delayed fence mutex5 const-fence const-extend const-timeouts ctl-minority5 ctl-nomark "
# Runs whose search takes long enough to pay for gcc -O2 (about 7 s to
# build against under 1 s at -O0, for a search about twice as fast), the
# longest first: they start first (below). The others' verifiers are
# built with -O0.
HEAVY=" pipe pipejoin pipejoin-crash fence-loss const-failover failover ctl-nomark crash-delayed ctl-replid replid fresh const-crash crash mutex-delayed fence-crash ctl-seedzero ctl-backlog ctl-minority5 extend-crash loss5 layer-sem-all layer-rw3-all extend layer-late lockout ctl-nodrift5 mutex5 fence-failover fresh-crash handoff failover-delayed timeouts5 fresh-id fresh-kill failover-kill fence "
declare -A TEXT=([exclusive]='ul[jj]>0' [fence]='fence[c]>maxFence' [order]='fence[c]>ofence[jj]' [orphan]='buriedAt[tt]' [lockout]='everState' [live]='acceptance cycle'
  [bound]='inside<=lowest' [rw]='inside==1')

want=("$@")
fail=0
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
sel=()
while IFS='|' read -r name defs expect search model; do
  [ -z "$name" ] && continue
  if [ ${#want[@]} -gt 0 ]; then
    [[ " ${want[*]} " == *" $name "* ]] || continue
  elif [[ "$EXTRA" == *" $name "* ]]; then
    continue
  fi
  sel+=("$name|$defs|$expect|$search|${model:-redlock.pml}")
done <<< "$RUNS"

# flags: the compile flags and the pan command of a run.
flags() {
  if [ "$4" = live ]; then echo "-DNFAIR=3${MODEL_COLLAPSE:+ -DCOLLAPSE}|./pan -a -f -m$LDEPTH -w26"
  elif [ "$3" = ok ]; then echo "-DSAFETY${MODEL_COLLAPSE:+ -DCOLLAPSE}|./pan -m$DEPTH -w26"
  elif [ "$4" = dfs ]; then echo "-DSAFETY|./pan -m$DEPTH -w26"
  else echo "-DSAFETY -DBFS -DCOLLAPSE|./pan"; fi
}
# opt: gcc's optimisation level for a run's verifier.
opt() { if [[ "$HEAVY" == *" $1 "* ]]; then echo -O2; else echo -O0; fi; }

# one: builds a run's verifier, runs it and judges its output; prints the
# run's line to $work/NAME/line and leaves $work/NAME/failed when it fails.
one() {
  local name=$1 defs=$2 expect=$3 search=$4 model=$5 cflags run dir out start ms errs secs states depth mem found replay len
  IFS='|' read -r cflags run <<< "$(flags "$name" "$defs" "$expect" "$search")"
  dir="$work/$name"; out="$dir/out.txt"
  # pan searches no model with hidden variables breadth-first: keep them.
  [[ "$cflags" == *-DBFS* ]] && defs="$defs -DKEEPALL"
  mkdir -p "$dir"; cp ./*.pml "$dir"/
  cd "$dir"
  if ! { spin $defs -a "$model" >/dev/null && gcc "$(opt "$name")" $cflags -DMEMLIM="$MEM" -o pan pan.c 2>/dev/null; }; then
    printf '%-16s FAIL  the verifier did not build (%s)\n' "$name" "$defs" > line; touch failed; return
  fi
  start=$(date +%s%N)
  $run > out.txt 2>&1 || true
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  errs=$(grep -o 'errors: [0-9]*' out.txt | head -1 | awk '{print $2}' || true)
  secs=$((ms / 1000)).$((ms % 1000 / 100))
  states=$(grep -o '[0-9.e+]* states, stored' "$out" | awk '{print $1}' || true)
  depth=$(grep -o 'depth reached [0-9]*' "$out" | awk '{print $3}' || true)
  mem=$(grep 'total actual memory usage' "$out" | awk '{print $1}' || true)
  # A counterexample found is one, even in a truncated search.
  found=0
  [ "$expect" != ok ] && [ "$errs" != 0 ] && grep -qF "${TEXT[$expect]}" "$out" && found=1
  if [ $found = 0 ] && grep -q 'max search depth too small' "$out"; then
    printf '%-16s FAIL  search truncated at depth %s (%s)\n' "$name" "$(grep -o '\-m[0-9]*' <<< "$run" | cut -c3-)" "$defs" > line; touch failed; return
  fi
  if grep -q 'out of memory\|reached -DMEMLIM' "$out"; then
    printf '%-16s FAIL  memory limit of %s MB reached after %s states (%s)\n' "$name" "$MEM" "$states" "$defs" > line; touch failed; return
  fi
  if [ "$expect" = ok ]; then
    if [ "$errs" = 0 ]; then
      printf '%-16s ok    %s states, depth %s, %s MB, %ss (%s)\n' "$name" "$states" "$depth" "$mem" "$secs" "$defs" > line
    else
      printf '%-16s FAIL  %s\n' "$name" "$(grep -m1 'violated\|error' "$out")" > line; touch failed
      cp "$model.trail" "$here/$name.trail" 2>/dev/null || true
    fi
  elif [ $found = 1 ]; then
    # spin -t does not run embedded C (SYMMETRY's canonical states): pan -r does.
    if [[ "$defs" == *SYMMETRY* ]]; then replay="./pan -r"; else replay="spin -t $defs $model"; fi
    len=$($replay 2>/dev/null | grep -c 'MSC:' || true)
    printf '%-16s ok    counterexample to %s: %s steps, %s printed events, after %s states, %ss (%s)\n' \
      "$name" "$expect" "$(grep -o 'at depth [0-9]*' "$out" | awk '{print $3}')" "$len" "$states" "$secs" "$defs" > line
  else
    printf '%-16s FAIL  the control found no violation of %s (%s states, %s)\n' "$name" "$expect" "$states" "$defs" > line; touch failed
  fi
}

# The runs go JOBS at a time (default: one a core), each building its own
# verifier, the HEAVY ones first and in the order of that list, so that
# the short runs fill the cores while the last long ones finish. Each
# run's line is printed when it ends, and all of them again in the
# table's order at the end.
here=$PWD
JOBS=${MODEL_JOBS:-$(nproc)}
order=()
for h in $HEAVY; do
  for entry in "${sel[@]}"; do [ "${entry%%|*}" = "$h" ] && order+=("$entry"); done
done
for entry in "${sel[@]}"; do [[ "$HEAVY" == *" ${entry%%|*} "* ]] || order+=("$entry"); done
began=$(date +%s)
for entry in "${order[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  IFS='|' read -r name defs expect search model <<< "$entry"
  ( one "$name" "$defs" "$expect" "$search" "$model"; cat "$work/$name/line" ) &
done
wait
echo "--- every run, in the table's order ($(( $(date +%s) - began )) s, $JOBS at a time):"
for entry in "${sel[@]}"; do
  name=${entry%%|*}
  if [ ! -e "$work/$name/line" ]; then
    cp "$work/$name/out.txt" "./$name.out" 2>/dev/null || true
    printf '%-16s FAIL  the run ended without a verdict (pan'"'"'s output: model/%s.out)\n' "$name" "$name"; fail=1; continue
  fi
  cat "$work/$name/line"
  [ -e "$work/$name/failed" ] && fail=1
done
# A const-NAME run keeps every variable in the state: it must store as
# many states as NAME, which hides the constant ones.
count() { grep -o '[0-9]* states, stored' "$work/$1/out.txt" 2>/dev/null | awk '{print $1}'; }
for entry in "${sel[@]}"; do
  name=${entry%%|*}; base=${name#const-}
  if [ "$name" != "$base" ] && [ -e "$work/$base/out.txt" ] && [ "$(count "$name")" != "$(count "$base")" ]; then
    echo "$name: $(count "$name") states, against $(count "$base") for $base with its constant variables hidden: a hidden variable changes"
    fail=1
  fi
done
exit $fail
