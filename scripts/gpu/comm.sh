#!/usr/bin/env bash
# GPU evidence for the comm suite on a lent machine (see benchmarks/results/nvidia-h200-x2/COMM.md).
# Usage: scripts/gpu/comm.sh OUT STEP...  (steps: suite gpu-suites harness bench bench_ar
# bench_bf16 bench_coll bench_dense). Writes into OUT: env.txt, pip.txt, comm_suite.txt or
# gpu_suites.txt, harness_nccl.txt, and NAME.tar per benchmark (comm.json, comm.txt,
# run.txt, PNGs). NVLink multicast stays off throughout.
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
ref=benchmarks/reference/nvidia-h200-x2
bench() {  # bench NAME TIMEOUT ARGS...: one rankgate bench comm run, packed as OUT/NAME.tar
  local name=$1 limit=$2; shift 2
  mkdir -p "/tmp/$name"
  timeout "$limit" python3 -m rankgate.bench.comm --out "/tmp/$name" --reference "$ref" "$@" 2>&1 \
    | tee "/tmp/$name/run.txt" | grep -E "^# (all_reduce fastest|auto /)|Error|error" | tail -8
  tar -C /tmp -cf "$out/$name.tar" "$name"
}
for step in "$@"; do
  echo "=== $step $(date -u +%T)"
  case $step in
    suite) timeout 300 python3 -m pytest -m gpu suites/comm -k "p2p or stress or errors" -q -p no:cacheprovider --rankgate-timeout 90 \
             --durations=15 -rfE 2>&1 | tee "$out/comm_suite.txt" | tail -25 ;;
    gpu-suites) timeout 270 python3 -m pytest -m gpu suites/ -q -p no:cacheprovider \
                  --rankgate-timeout 120 --durations=20 -rfE 2>&1 | tee "$out/gpu_suites.txt" | tail -30 ;;
    harness) timeout 50 python3 -m rankgate.cli bench harness --backend nccl --worlds 2 --json 2>&1 \
               | tee "$out/harness_nccl.txt" | tail -8 ;;
    bench) bench bench 300 ;;  # the defaults: every collective, fp32, 8 B..2 GiB by 4
    bench_ar) bench bench_ar 200 --collectives all_reduce --buffer-bytes 64M -f 4 --iters 20 --reps 5 \
                --rounds 3 ;;
    # bf16 up to 64 MiB, so that NCCL wins somewhere and auto's bf16 crossovers are measured
    bench_bf16) bench bench_bf16 200 --collectives all_reduce --dtype bf16 -b 1K -e 64M -f 4 \
                  --buffer-bytes 64M --iters 30 --reps 5 --rounds 3 ;;
    # every power of two from 1 KiB to 1 GiB (64 KiB and 256 MiB included), more repetitions
    bench_dense) bench bench_dense 300 --collectives all_reduce --buffer-bytes 64M -b 1K -e 1G \
                   -f 2 --iters 40 --reps 9 --rounds 3 ;;
    bench_coll) bench bench_coll 120 --backends nccl,auto \
                  --collectives broadcast,all_gather,reduce_scatter,send_recv ;;
  esac
done
echo "=== done $(date -u +%T)"
