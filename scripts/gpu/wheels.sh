#!/usr/bin/env bash
# Build .whl-ds: the wheels the GPU hosts lack (they have no package index), carried to
# them by the device tool and installed by two-gpus.sh beside the host's packages:
# DeepSpeed (its GPU trainer tests run there, not skip) and what it needs, expecttest
# (torch.testing._internal imports it) and pytest-xdist. Not pytest-randomly: it would
# shuffle every run there (one in-place test skips without it). The hosts run CPython
# 3.12 on x86_64 Linux, whatever this machine runs.
# Usage: scripts/gpu/wheels.sh  (run here, in the repository root; about 10 MiB)
set -euo pipefail
dest=.whl-ds
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
python -m pip download -q --no-deps deepspeed==0.19.8 -d "$build"
# DeepSpeed ships an sdist only; its ops are built on first use, so none are built here.
DS_BUILD_OPS=0 python -m pip wheel -q --no-deps --no-build-isolation "$build"/deepspeed-*.tar.gz -w "$build"
mkdir -p "$dest"
cp "$build"/deepspeed-*.whl "$dest"/
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 -d "$dest" \
    einops hjson msgpack ninja psutil py-cpuinfo pydantic pydantic-core annotated-types \
    typing-inspection typing-extensions tqdm expecttest pytest-xdist execnet
ls "$dest"
