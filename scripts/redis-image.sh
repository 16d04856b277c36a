#!/usr/bin/env bash
# redis-image.sh builds the Docker image redquorum/redis:7-local without a registry.
#
# It copies Debian's redis-server binary (installing it first when missing),
# every shared library ldd lists for it, the dynamic loader and a minimal /etc
# into a temporary root filesystem, and builds docker/redis/Dockerfile
# (FROM scratch) on top of it with the classic builder, which needs no image.
#
# The image carries a label with a hash of its inputs (Dockerfile, binary,
# libraries, this script); when an image with the tag and the same hash exists,
# the script does nothing. With REDIS_IMAGE_PULL=1 it instead pulls redis:7 and
# tags it (for machines with a registry). After changing docker/redis/, run it
# again: locktest/rig builds the image only when it is missing.
set -euo pipefail

IMAGE="redquorum/redis:7-local" # locktest/rig.Image
LABEL="org.redquorum.inputs"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DOCKERFILE="$ROOT/docker/redis/Dockerfile"

log() { printf 'redis-image: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v docker >/dev/null 2>&1 || die "docker CLI not found"
docker info >/dev/null 2>&1 || die "cannot reach the Docker daemon (is it running? DOCKER_HOST=${DOCKER_HOST:-unset})"

if [ "${REDIS_IMAGE_PULL:-0}" = "1" ]; then
	log "REDIS_IMAGE_PULL=1: pulling redis:7 and tagging it $IMAGE"
	docker pull redis:7 || die "docker pull redis:7 failed"
	docker tag redis:7 "$IMAGE"
	log "done: $IMAGE"
	exit 0
fi

# Find the real binary: in Debian /usr/bin/redis-server is a symlink to
# redis-check-rdb, and the binary picks its mode from argv[0].
if ! command -v redis-server >/dev/null 2>&1; then
	"$ROOT/scripts/ensure-redis-server.sh" || die "could not install redis-server"
fi
BIN="$(readlink -f "$(command -v redis-server)")"
[ -x "$BIN" ] || die "redis-server resolves to $BIN, which is not executable"
command -v ldd >/dev/null 2>&1 || die "ldd not found (package libc-bin)"

# Shared libraries, one absolute path per line: "name => /path (addr)" lines
# and the loader's own "/lib64/ld-linux-x86-64.so.2 (addr)" line.
mapfile -t LIBS < <(ldd "$BIN" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u)
[ "${#LIBS[@]}" -gt 0 ] || die "ldd listed no libraries for $BIN (static binary?)"
for lib in "${LIBS[@]}"; do
	[ -e "$lib" ] || die "ldd lists $lib, which does not exist"
done

# Hash of everything that goes into the image.
INPUTS="$( { sha256sum "$DOCKERFILE" "${BASH_SOURCE[0]}" "$BIN"; for lib in "${LIBS[@]}"; do printf '%s ' "$lib"; sha256sum <"$(readlink -f "$lib")"; done; } | sha256sum | cut -c1-64)"

CURRENT="$(docker image inspect --format "{{ index .Config.Labels \"$LABEL\" }}" "$IMAGE" 2>/dev/null || true)"
if [ "$CURRENT" = "$INPUTS" ]; then
	log "$IMAGE is up to date"
	exit 0
fi
if [ -n "$CURRENT" ]; then
	log "$IMAGE exists but its inputs changed; rebuilding"
fi

CTX="$(mktemp -d "${TMPDIR:-/tmp}/redis-image.XXXXXX")"
trap 'rm -rf "$CTX"' EXIT
RFS="$CTX/rootfs"

log "assembling root filesystem from $BIN ($(redis-server --version | head -n1))"
mkdir -p "$RFS/usr/bin" "$RFS/etc" "$RFS/tmp" "$RFS/data"
chmod 1777 "$RFS/tmp" "$RFS/data"
cp -L "$BIN" "$RFS/usr/bin/redis-server"
for lib in "${LIBS[@]}"; do
	mkdir -p "$RFS$(dirname "$lib")"
	cp -L "$lib" "$RFS$lib"
done
cat >"$RFS/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/usr/sbin/nologin
redis:x:999:999:redis:/data:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
PASSWD
cat >"$RFS/etc/group" <<'GROUP'
root:x:0:
redis:x:999:
nogroup:x:65534:
GROUP
cp "$DOCKERFILE" "$CTX/Dockerfile"

# Check the root filesystem before handing it to Docker: the copied binary
# must start under its new name with only the copied libraries.
if [ "$(id -u)" -eq 0 ] && command -v chroot >/dev/null 2>&1; then
	chroot "$RFS" /usr/bin/redis-server --version >/dev/null 2>&1 ||
		die "the assembled root filesystem does not run redis-server (chroot $RFS /usr/bin/redis-server --version)"
fi

log "building $IMAGE"
# The classic builder (DOCKER_BUILDKIT=0) builds FROM scratch without pulling
# anything; BuildKit would fetch a Dockerfile front end.
DOCKER_BUILDKIT=0 docker build --quiet --label "$LABEL=$INPUTS" -t "$IMAGE" "$CTX" >/dev/null 2>"$CTX/build.log" || {
	cat "$CTX/build.log" >&2
	die "docker build failed"
}
log "done: $IMAGE ($(docker image inspect --format '{{.Size}}' "$IMAGE") bytes)"
