#!/usr/bin/env bash
# ensure-redis-server.sh installs Debian's redis-server when it is missing.
#
# It is a no-op when a redis-server binary is already on PATH. It needs root
# (or sudo) and apt-get; it runs `apt-get update` only when a plain install
# fails, so a warm machine does not touch the network.
set -euo pipefail

log() { printf 'ensure-redis-server: %s\n' "$*" >&2; }

if command -v redis-server >/dev/null 2>&1; then
	log "found $(redis-server --version | head -n1)"
	exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
	log "redis-server is missing and apt-get is not available; install Redis 7 by hand"
	exit 1
fi

SUDO=
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO=sudo
	else
		log "redis-server is missing and installing it needs root (no sudo found)"
		exit 1
	fi
fi

export DEBIAN_FRONTEND=noninteractive
log "installing redis-server from Debian"
if ! $SUDO apt-get install -y --no-install-recommends redis-server >/dev/null; then
	log "install failed; running apt-get update and retrying"
	$SUDO apt-get update >/dev/null
	$SUDO apt-get install -y --no-install-recommends redis-server >/dev/null
fi

# The package starts a system service on some machines; tests start their own
# servers, so a service left running would only hold port 6379.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet redis-server 2>/dev/null; then
	log "note: the redis-server system service is running on port 6379"
fi

log "installed $(redis-server --version | head -n1)"
