#!/usr/bin/env bash
# After a change to the harness, on a 4-GPU host in one short call: every suite's
# `-m "dist or gpu"` in place in two halves side by side (GPUs 0,1: suites/comm; GPUs
# 2,3: the rest), then on each pair the pool checks that changed since the last run.
# Usage: scripts/gpu/final-checks.sh OUT [SECONDS]   (OUT/all.tgz: every log and JUnit)
set -uo pipefail
out=$1 limit=${2:-170}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
o=/tmp/final && mkdir -p $o/prep $o/a $o/b
bash scripts/gpu/two-gpus.sh $o/prep >$o/prep/log.txt 2>&1 || { tail -5 $o/prep/log.txt; exit 3; }
export SKIP_INSTALL=1
export REST="tests/harness suites/parallel suites/trainer suites/data suites/pipeline"
export POOL_FILES="tests/harness/test_adopt_torchcase.py tests/harness/test_adopt_freshgroup.py tests/harness/test_planted_divergences.py"
export o
# shellcheck disable=SC2016 # the inner shell expands these
timeout "$limit" bash -c '
  (GPUS=0,1 WORK=/tmp/rgA INPLACE_PATHS=suites/comm bash scripts/gpu/two-gpus.sh $o/a inplace \
     >$o/a/log.txt 2>&1; CUDA_VISIBLE_DEVICES=0,1 bash scripts/gpu/flaky_nccl.sh $o/a/flaky \
     >>$o/a/log.txt 2>&1) &
  GPUS=2,3 WORK=/tmp/rgB INPLACE_PATHS=$REST HARNESS_FILES=$POOL_FILES \
     bash scripts/gpu/two-gpus.sh $o/b inplace pool-harness >$o/b/log.txt 2>&1
  wait'
echo "checks rc $?"
for d in /tmp/rgA /tmp/rgB; do [ -d $d ] && cp -r $d $o/; done
tar -czf "$out/all.tgz" -C $o .
tail -4 $o/a/log.txt $o/b/log.txt
