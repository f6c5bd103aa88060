#!/usr/bin/env bash
# The final tree's GPU checks: p2p routing/selection/harness GPU tests in a pool, then
# the selection suite in place under torchrun on both GPUs (gloo and nccl tests).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || export PYTHONPATH=$PWD/src
out=$1
timeout 110 python3 -m pytest -m gpu suites/comm/test_comm_p2p.py suites/comm/test_comm_selection.py \
  suites/harness/test_gpu.py -q -p no:cacheprovider -rfE 2>&1 | tail -15 | tee "$out/pool_gpu.txt"
mkdir -p /tmp/ip
timeout 60 torchrun --standalone --nproc-per-node=2 -m pytest suites/comm/test_comm_selection.py \
  -q -p no:cacheprovider -rfEs --junitxml=/tmp/ip/junit.xml 2>&1 | tail -25 | tee "$out/inplace_gpu.txt"
ls /tmp/ip >> "$out/inplace_gpu.txt"
