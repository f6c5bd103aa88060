#!/usr/bin/env bash
# Install this checkout into the GPU host's python3 and prove pytest loads the plugin.
# Source it from the other scripts/gpu/ scripts: `. scripts/gpu/install.sh LOG`.
# `python3 -m pip`, never plain `pip`: on these hosts `pip` belongs to another
# interpreter, and the plugin then silently does not load (every suite fails to collect
# with "'world' not found in `markers`").
log=${1:-/dev/null}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
if ! python3 -m pip install -q --no-deps --no-build-isolation -e . >"$log" 2>&1; then
    echo "rankgate install failed (python3 -m pip install -e .); see $log" >&2
    tail -5 "$log" >&2
    exit 3
fi
# Read the whole list first: grep -q stopping early would fail the pipe under pipefail.
markers=$(python3 -m pytest -p no:cacheprovider --markers 2>&1)
if ! grep -q "^@pytest.mark.world" <<<"$markers"; then
    echo "rankgate's pytest plugin does not load in $(command -v python3): 'python3 -m pytest" \
        "--markers' lists no world marker" >&2
    exit 3
fi
