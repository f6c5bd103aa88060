#!/usr/bin/env bash
# GPU evidence for the comm suite on a lent machine (see benchmarks/results/nvidia-h200-x2/COMM.md).
# Usage: scripts/gpu/comm.sh OUT STEP...  (steps: push-float push-truncated suite comm-suite
# gpu-suites harness bench bench_ar bench_bf16 bench_coll bench_dense graph_fp32 graph_bf16).
# Writes into OUT: env.txt, pip.txt, push_float.txt, push_truncated.txt, comm_suite.txt or
# gpu_suites.txt, harness_nccl.txt, and NAME.tar per benchmark (comm.json, comm.txt,
# run.txt, PNGs). NVLink multicast stays off throughout.
set -uo pipefail
out=$1; shift
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/pip.txt" 2>&1 || export PYTHONPATH=$PWD/src
{
  date -u; nvidia-smi -L; nvidia-smi topo -m
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 - <<'PY'
import importlib.metadata as md
import torch, torch.distributed as dist
print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())
print("nvidia-ml-py", md.version("nvidia-ml-py"))
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
    # the push kernel on random floats (fp32, bf16) and NVML's links against nvidia-smi's
    push-float) timeout 90 python3 -m pytest -s -q -p no:cacheprovider -rfE \
                  "suites/comm/test_comm_p2p.py::test_push_rounds_random_floats_like_the_reference_on_every_rank" \
                  tests/workloads/test_comm_detect.py::test_nvml_links_agree_with_nvidia_smi 2>&1 \
                  | tee "$out/push_float.txt" | tail -8 ;;
    # the same float test on a kernel that truncates to bf16 instead of rounding: bf16 must fail
    push-truncated) rm -rf /tmp/truncated && mkdir -p /tmp/truncated && cp -r src /tmp/truncated/ \
        && sed -i 's/u += 0x7FFFu + ((u >> 16) \& 1u);//' /tmp/truncated/src/rankgate/workloads/comm/push_kernel.py \
        && PYTHONPATH=/tmp/truncated/src timeout 90 python3 -m pytest -q -p no:cacheprovider -rfE \
             "suites/comm/test_comm_p2p.py::test_push_rounds_random_floats_like_the_reference_on_every_rank" 2>&1 \
        | tee "$out/push_truncated.txt" | tail -6 ;;
    comm-suite) timeout 240 python3 -m pytest -m gpu suites/comm -q -p no:cacheprovider --rankgate-timeout 90 \
             --durations=15 -rfE 2>&1 | tee "$out/comm_suite.txt" | tail -25 ;;
    suite) timeout 300 python3 -m pytest -m gpu suites/comm -k "p2p or stress or errors" -q -p no:cacheprovider --rankgate-timeout 90 \
             --durations=15 -rfE 2>&1 | tee "$out/comm_suite.txt" | tail -25 ;;
    gpu-suites) timeout 270 python3 -m pytest -m gpu suites/ tests/harness/ -q -p no:cacheprovider \
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
    # auto routed by P2PConfig's shipped sizes against every single backend, in a CUDA graph
    # at every power of two from 1 KiB to 64 MiB; a 64M buffer lets the forced one-shot and
    # two-shot reach 32 MiB (auto's routing is the same as with the default 32M buffer)
    graph_fp32) bench graph_fp32 120 --collectives all_reduce -b 1K -e 64M -f 2 --buffer-bytes 64M \
                  --auto-thresholds defaults --iters 20 --reps 5 --rounds 3 ;;
    graph_bf16) bench graph_bf16 120 --collectives all_reduce --dtype bf16 -b 1K -e 64M -f 2 \
                  --buffer-bytes 64M --auto-thresholds defaults --iters 20 --reps 5 --rounds 3 ;;
    bench_coll) bench bench_coll 120 --backends nccl,auto \
                  --collectives broadcast,all_gather,reduce_scatter,send_recv ;;
  esac
done
echo "=== done $(date -u +%T)"
