#!/usr/bin/env bash
# ensure-redis-server.sh installs Debian's redis-server when it is missing
# (see ensure-deb.sh: a no-op when redis-server is on PATH).
set -euo pipefail

log() { printf 'ensure-redis-server: %s\n' "$*" >&2; }

if command -v redis-server >/dev/null 2>&1; then
	log "found $(redis-server --version | head -n1)"
	exit 0
fi
"$(dirname "$0")/ensure-deb.sh" redis-server redis-server

# The package starts a system service on some machines; tests start their own
# servers, so a service left running would only hold port 6379.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet redis-server 2>/dev/null; then
	log "note: the redis-server system service is running on port 6379"
fi

log "installed $(redis-server --version | head -n1)"
