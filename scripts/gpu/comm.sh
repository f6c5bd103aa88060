#!/usr/bin/env bash
# GPU evidence for the comm suite on a lent machine (see benchmarks/results/README.md).
# Usage: scripts/gpu/comm.sh OUT [suite] [bench] [harness] [gpu-suites]
# Writes into OUT: env.txt, comm_suite.txt, bench.tar (comm.json, comm.txt, PNGs),
# harness_nccl.txt, gpu_suites.txt. NVLink multicast stays off throughout.
set -uo pipefail
out=$1; shift
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/pip.txt" 2>&1 || export PYTHONPATH=$PWD/src
{
  date -u; nvidia-smi -L; nvidia-smi topo -m
  python3 - <<'PY'
import torch, torch.distributed as dist
print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())
print("gpus", torch.cuda.device_count(), [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
print("peer 0->1", torch.cuda.device_count() > 1 and torch.cuda.can_device_access_peer(0, 1))
ops = torch.ops.symm_mem
for n in ("one_shot_all_reduce_out", "one_shot_all_reduce_copy_out", "two_shot_all_reduce_out"):
    print(n, hasattr(ops, n))
PY
} >"$out/env.txt" 2>&1
for step in "$@"; do
  case $step in
    suite) timeout 300 python3 -m pytest -m gpu suites/comm -q -p no:cacheprovider --rankgate-timeout 90 \
             --durations=15 -rfE 2>&1 | tee "$out/comm_suite.txt" | tail -25 ;;
    bench) mkdir -p /tmp/bench
           timeout 300 python3 -m rankgate.bench.comm --out /tmp/bench \
             --reference benchmarks/reference/nvidia-h200-x2 \
             2>&1 | tee /tmp/bench/run.txt | tail -60
           tar -C /tmp -cf "$out/bench.tar" bench ;;
    harness) timeout 200 python3 -m rankgate.cli bench harness --backend nccl --json 2>&1 \
               | tee "$out/harness_nccl.txt" | tail -8 ;;
    gpu-suites) timeout 400 python3 -m pytest -m gpu suites/ -q -p no:cacheprovider \
                  --rankgate-timeout 120 -rfE 2>&1 | tee "$out/gpu_suites.txt" | tail -25 ;;
  esac
done
