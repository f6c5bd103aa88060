#!/usr/bin/env bash
# The shortest check after a harness change on 2 GPUs: the harness suites and the p2p tests
# in place, then the pool files that changed and a flaky NCCL test rerun.
# Usage: scripts/gpu/short-checks.sh OUT [SECONDS]   (OUT/all.tgz: every log and JUnit)
set -uo pipefail
out=$1 limit=${2:-130}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
o=/tmp/short && mkdir -p $o/prep $o/a
bash scripts/gpu/two-gpus.sh $o/prep >$o/prep/log.txt 2>&1 || { tail -5 $o/prep/log.txt; exit 3; }
export SKIP_INSTALL=1 o
export INPLACE_PATHS="suites/harness suites/comm/test_comm_p2p.py"
export HARNESS_FILES="suites/harness/test_planted_divergences.py suites/harness/test_adopt_torchcase.py suites/harness/test_adopt_freshgroup.py"
# shellcheck disable=SC2016 # the inner shell expands these
timeout "$limit" bash -c 'WORK=/tmp/rgA bash scripts/gpu/two-gpus.sh $o/a inplace pool-harness \
    >$o/a/log.txt 2>&1; bash scripts/gpu/flaky_nccl.sh $o/a/flaky >>$o/a/log.txt 2>&1'
echo "checks rc $?"
[ -d /tmp/rgA ] && cp -r /tmp/rgA $o/
tar -czf "$out/all.tgz" -C $o .
tail -12 $o/a/log.txt
