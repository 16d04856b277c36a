#!/usr/bin/env bash
# ensure-deb.sh BINARY PACKAGE installs Debian's PACKAGE when BINARY is not
# on PATH (scripts/ensure-redis-server.sh for redis-server, the Makefile's
# model target for spin).
#
# It is a no-op when BINARY is already on PATH. It needs root (or sudo) and
# apt-get; it runs `apt-get update` only when a plain install fails, so a
# warm machine does not touch the network.
set -euo pipefail
bin=$1 pkg=$2

log() { printf 'ensure-deb: %s\n' "$*" >&2; }

if command -v "$bin" >/dev/null 2>&1; then
	exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
	log "$bin is missing and apt-get is not available; install $pkg by hand"
	exit 1
fi

SUDO=
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO=sudo
	else
		log "$bin is missing and installing $pkg needs root (no sudo found)"
		exit 1
	fi
fi

export DEBIAN_FRONTEND=noninteractive
log "installing $pkg from Debian"
if ! $SUDO apt-get install -y --no-install-recommends "$pkg" >/dev/null; then
	log "install failed; running apt-get update and retrying"
	$SUDO apt-get update >/dev/null
	$SUDO apt-get install -y --no-install-recommends "$pkg" >/dev/null
fi
command -v "$bin" >/dev/null 2>&1 || { log "$pkg installed no $bin"; exit 1; }
