#!/usr/bin/env bash
# Build one image variant of containers/matrix.toml with podman or docker; the last
# line printed is the image's tag. The cpu-local variant needs no registry: its base
# comes from scripts/container/base-image.sh and torch from the host's wheel directory.
#
#   scripts/container/build.sh cpu-local
#   scripts/container/build.sh --help
set -euo pipefail
cd "$(dirname "$0")/../.."
exec "${PYTHON:-python3}" -m rankgate.pipeline.container build "$@"
