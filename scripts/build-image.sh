#!/usr/bin/env bash
# Build the GridStat image (one image, every role) without any registry.
#
#   scripts/build-image.sh [TAG]     default TAG: gridstat:dev; prints READY image=TAG
#   GRIDSTAT_IMAGE_LABEL=key=value scripts/build-image.sh TAG
#                                    the same build with one more label: a new image (a new digest)
#                                    from cached layers in seconds, e.g. to try `helm upgrade` of a new tag
#
# 1. The engine: scripts/docker.sh start (Debian's docker.io, host networking only).
# 2. The base image local/debian:bookworm, made once with `debootstrap --variant=minbase` from the
#    Debian mirror apt already uses; the root filesystem is kept as a tarball in
#    ${GRIDSTAT_CACHE:-~/.cache/gridstat}/debian-bookworm-rootfs.tar so a new engine re-imports it
#    in seconds instead of bootstrapping again.
# 3. `docker build --network host` of ./Dockerfile (apt and pip reach their registries through the
#    host's network; the classic builder, which honours --network host). PyPI is reached through
#    the host's CA certificates (see the Dockerfile's builder stage).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tag=${1:-gridstat:dev}
base=local/debian:bookworm
cache=${GRIDSTAT_CACHE:-$HOME/.cache/gridstat}
tarball=$cache/debian-bookworm-rootfs.tar
started=$SECONDS

die() { echo "build-image.sh: $*" >&2; exit 1; }

"$root/scripts/docker.sh" start >/dev/null
eval "$("$root/scripts/docker.sh" env)"

mirror() {
  local uri
  uri=$(sed -n 's/^URIs: *\(http[^ ]*debian\)\/*$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  echo "${GRIDSTAT_DEBIAN_MIRROR:-${uri:-http://deb.debian.org/debian}}"
}

if ! docker image inspect "$base" >/dev/null 2>&1; then
  if [ ! -f "$tarball" ]; then
    command -v debootstrap >/dev/null 2>&1 || {
      (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap) >&2 \
        || die "apt-get could not install debootstrap"; }
    rootfs=$(mktemp -d "$cache/rootfs.XXXXXX")
    echo "build-image.sh: debootstrap bookworm from $(mirror) (once; a few minutes)" >&2
    debootstrap --variant=minbase bookworm "$rootfs" "$(mirror)" >"$cache/debootstrap.log" 2>&1 \
      || { tail -20 "$cache/debootstrap.log" >&2; rm -rf "$rootfs"; die "debootstrap failed"; }
    # Keep the image small and its apt pointed at the same mirror.
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    echo "deb $(mirror) bookworm main" > "$rootfs/etc/apt/sources.list"
    tar -C "$rootfs" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
  fi
  docker import "$tarball" "$base" >/dev/null
fi

# The context is a tar stream: Dockerfile, services/, operator/, deploy/image/ (no caches, no .venv)
# plus the build host's extra CA certificates in deploy/image/ca/, which the builder stage needs where
# egress is TLS-inspected (the checkout is not touched).
ca=$(mktemp -d)
trap 'rm -rf "$ca"' EXIT
mkdir -p "$ca/deploy/image/ca"
cp /usr/local/share/ca-certificates/*.crt "$ca/deploy/image/ca/" 2>/dev/null || true
tar -c --exclude='__pycache__' --exclude='*.egg-info' --exclude='build' --exclude='*.pyc' \
    -C "$root" Dockerfile services operator deploy/image -C "$ca" deploy \
  | DOCKER_BUILDKIT=0 docker build --network host --force-rm ${GRIDSTAT_IMAGE_LABEL:+--label "$GRIDSTAT_IMAGE_LABEL"} -t "$tag" - >"$cache/image-build.log" 2>&1 \
  || { tail -30 "$cache/image-build.log" >&2; die "docker build failed (log: $cache/image-build.log)"; }
# The builder stage's leftovers (dangling images of this project's own engine).
docker image prune -f >/dev/null 2>&1 || true
echo "build-image.sh: $tag built in $((SECONDS - started)) s" >&2
echo "READY image=$tag"
