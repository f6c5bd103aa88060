#!/usr/bin/env bash
# Build a local Debian bookworm base image without any container registry:
# debootstrap a minimal root filesystem and `podman import` it.
#
#   scripts/container/base-image.sh [TAG]      (default localhost/rankgate-base:bookworm)
#
# The image has python3.11 (matches the cp311 CPU torch wheel), venv (with pip), CA
# certificates and Open MPI's mpirun (the container stage runs pytest in place under it). Debian's mirror comes from MIRROR (default: deb.debian.org).
# Needs root, debootstrap and podman (apt-get install debootstrap podman runc).
set -euo pipefail

tag=${1:-localhost/rankgate-base:bookworm}
mirror=${MIRROR:-http://deb.debian.org/debian}
suite=${SUITE:-bookworm}
engine=${CONTAINER_ENGINE:-podman}

if "$engine" image exists "$tag" 2>/dev/null && [ -z "${REBUILD:-}" ]; then
    echo "base-image: $tag exists (REBUILD=1 to build it again)"
    exit 0
fi

for tool in debootstrap "$engine"; do
    command -v "$tool" >/dev/null || { echo "base-image: $tool not found; apt-get install debootstrap podman runc" >&2; exit 2; }
done

rootfs=$(mktemp -d /tmp/rankgate-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT

echo "base-image: debootstrap $suite from $mirror"
start=$SECONDS
debootstrap --variant=minbase \
    --include=python3,python3-venv,ca-certificates,openmpi-bin \
    "$suite" "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || { tail -n 30 "$rootfs.log" >&2; exit 1; }
rm -f "$rootfs.log"
# Keep the image small: no package lists or caches.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*

echo "base-image: import as $tag"
tar -C "$rootfs" -c . | "$engine" import \
    --change 'CMD ["/bin/bash"]' \
    --change 'ENV LANG=C.UTF-8' \
    - "$tag" >/dev/null
echo "base-image: $tag ready in $((SECONDS - start)) s"
