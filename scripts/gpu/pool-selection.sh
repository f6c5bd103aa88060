#!/usr/bin/env bash
# The pool's whole `-m "dist or gpu"` selection of suites/ and tests/harness/ on a host
# with 4 GPUs, run as two 2-GPU machines side by side (each pair its own
# CUDA_VISIBLE_DEVICES and lease dir):
#   GPUs 0,1: every suite (-n 3), then the harness files of PAIR_A;
#   GPUs 2,3: every other harness file (-n 6), new ones included, so none is left out.
# Measured on nvidia-h100-x4 (benchmarks/results/nvidia-h100-x4/harness-pool-2026-11-27/):
# the rest about 325 s at -n 3, PAIR_A's files 146 s, the others 273 + 136 s at -n 6.
# Usage: scripts/gpu/pool-selection.sh OUT [SECONDS]  (every run ends by SECONDS, default
# 540, with SIGINT: pytest then writes its summary and a JUnit that says what did not run)
set -uo pipefail
out=$1
budget=${2:-540}
mkdir -p "$out/prep"
bash scripts/gpu/two-gpus.sh "$out/prep" >"$out/prep/log.txt" 2>&1 || exit $?
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} SKIP_INSTALL=1 STOP_SIGNAL=INT

pair_a=(interrupted shards reruns_inplace inplace_temp_dirs marker_placement reruns
        test_styles launch_detection quarantine rank_process)
files_a=() files_b=()
for file in tests/harness/test_*.py; do
  name=$(basename "$file" .py)
  if [[ " ${pair_a[*]} " == *" ${name#test_} "* ]]; then files_a+=("$file"); else files_b+=("$file"); fi
done

left() { echo $((budget - SECONDS)); }
run() {  # run NAME GPUS WORKERS STEP LIMIT [FILES...]: one two-gpus.sh step on one pair
  local name=$1 gpus=$2 workers=$3 step=$4 limit=$5; shift 5
  mkdir -p "$out/$name"
  GPUS=$gpus WORK=/tmp/rg-$name XDIST=$workers POOL_LIMIT=$limit HARNESS_FILES="$*" \
    bash scripts/gpu/two-gpus.sh "$out/$name" "$step" >"$out/$name/log.txt" 2>&1
}
(run rest 0,1 3 pool-rest $(($(left) - 150)); run harness-a 0,1 6 pool-harness "$(left)" "${files_a[@]}") &
(run harness-b 2,3 6 pool-harness "$(left)" "${files_b[@]}") &
wait
for name in rest harness-a harness-b; do
  echo "== $name"; tail -4 "$out/$name/log.txt"
done
