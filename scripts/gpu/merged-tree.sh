#!/usr/bin/env bash
# One lease, the whole merged tree on a GPU host: the parallelism suite, the attention
# benchmark at worlds 1 and 2 (1 alone on one GPU), then every other GPU test in the pool.
# Usage: [INPLACE_LIMIT=600] [ATTENTION_SEQ_LENS=16K,...] scripts/gpu/merged-tree.sh OUT
# (writes env.txt, parallel_gpu.txt, attention/, attention.txt, gpu_suites.txt, inplace/
# and JUnit files). Each step has its own time limit so a slow step leaves the others'
# results. The device tool brings back 8 files, so the end packs everything into
# results.tgz and keeps only the step logs beside it.
set -uo pipefail
out=$1
export NVSHMEM_DISABLE_NVLS=1
. scripts/gpu/install.sh "$out/pip.txt" || exit $?
{
  date -u; nvidia-smi -L; nvidia-smi topo -m
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
} >"$out/env.txt" 2>&1
step() { echo "=== $1 $(date -u +%T)"; }
gpus=$(nvidia-smi -L | wc -l)  # the attention worlds and the in-place ranks

step parallel
timeout 90 python3 -m pytest -p no:cacheprovider -m gpu \
  suites/parallel -rA -q --junitxml="$out/parallel_junit.xml" >"$out/parallel_gpu.txt" 2>&1
echo "rc $?"; tail -3 "$out/parallel_gpu.txt"

step attention
worlds=1; [ "$gpus" -ge 2 ] && worlds=1,2
timeout 150 python3 -m rankgate.cli bench attention --worlds "$worlds" \
  --seq-lens "${ATTENTION_SEQ_LENS:-16K,32K,64K,128K}" \
  --reps 3 --skip ring@1 --fit-cap-gib 8 --out "$out/attention" >"$out/attention.txt" 2>&1
echo "rc $?"; tail -25 "$out/attention.txt"

step gpu-suites
timeout "${GPU_SUITES_LIMIT:-120}" python3 -m pytest -p no:cacheprovider \
  -m gpu suites tests/harness --ignore=suites/parallel -q -rfEs --junitxml="$out/gpu_junit.xml" \
  >"$out/gpu_suites.txt" 2>&1
echo "rc $?"; tail -5 "$out/gpu_suites.txt"
# The whole dist and gpu selections in place on every GPU (INPLACE_LIMIT seconds; it
# needs about 10 minutes on 2xH200, so it runs only when asked for).
if [ "${INPLACE_LIMIT:-0}" -gt 0 ]; then
  step inplace
  mkdir -p "$out/inplace"
  timeout "$INPLACE_LIMIT" torchrun --standalone --nproc-per-node="$gpus" \
    -m pytest -p no:cacheprovider -m "dist or gpu" suites tests/harness -q -rfEs \
    --junitxml="$out/inplace/junit.xml" >"$out/inplace/torchrun.txt" 2>&1
  echo "rc $?"; tail -5 "$out/inplace/torchrun.txt"
fi
step finished
tar -czf /tmp/results.tgz -C "$out" . && mv /tmp/results.tgz "$out/"
find "$out" -type f ! -name results.tgz ! -name env.txt ! -name parallel_gpu.txt \
  ! -name attention.txt ! -name gpu_suites.txt ! -name torchrun.txt -delete
