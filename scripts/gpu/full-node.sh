#!/usr/bin/env bash
# After a change to the harness, on a whole 4-GPU host: STEPS among
#   inplace4  every suite's `-m "dist or gpu"` in place under torchrun, 4 ranks
#   inplace2  the same with 2 ranks
#   pool-all  the pool's whole `-m "dist or gpu"` selection, one run, XDIST workers (default 4);
#             the planted divergences' inner outputs (verdicts, JUnit) kept in planted.tgz
#   pool-all-start, pool-all-wait
#             pool-all in a new process session (setsid), which the device tool leaves
#             running after the call returns, and a later call's wait for it (WAIT_LIMIT s,
#             default 540): a run longer than one call (POOL_LIMIT default 1500 there).
#             Calls must follow each other within the machine's idle release (30 s).
#   pool-n1   the same selection with `-n 1`, stopped at inplace4's wall time plus
#             N1_MARGIN s (default 10): a pool slower than in place at 4 ranks runs out
#   ledger-ab the ledger on against off, bench harness on NCCL (scripts/gpu/ledger-ab.sh)
#   bench     `bench harness` on NCCL at worlds 2 and 4 (twice) and the comm sweep of issue
#             57 at world 4 (spawn path, 1 KiB-64 MiB by 4, every collective, 5 backends)
# Usage: scripts/gpu/full-node.sh OUT STEP...   (OUT/results.tgz: every log and JUnit)
# RG_FRESH=1 empties /tmp/rg first (a host can hold an earlier lease's files there).
set -uo pipefail
out=$1; shift
work=/tmp/rg
[ -n "${RG_FRESH:-}" ] && rm -rf $work
mkdir -p $work
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
bash scripts/gpu/two-gpus.sh "$out" >$work/install.txt 2>&1 || { tail -5 $work/install.txt; exit 3; }
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export SKIP_INSTALL=1 STOP_SIGNAL=INT
keep_planted() {  # the planted divergences' inner outputs from a pool run's basetemp
  (cd $work/pool-base && find . \( -path '*planted*' -o -path '*names_the_culpri*' \) \
     \( -name output.txt -o -name '*.xml' -o -name '*.log' -o -name 'test_planted*.py' \) -print0 \
     | tar -czf $work/planted.tgz --null -T -)
  rm -rf $work/pool-base
}
for s in "$@"; do
  echo "=== $s $(date -u +%T)"
  case $s in
    inplace4) NPROC=4 INPLACE_LIMIT=${INPLACE4_LIMIT:-400} bash scripts/gpu/two-gpus.sh "$out" inplace
              mv $work/inplace $work/inplace4; mv $work/inplace.txt $work/inplace4.txt ;;
    inplace2) NPROC=2 INPLACE_LIMIT=${INPLACE2_LIMIT:-400} bash scripts/gpu/two-gpus.sh "$out" inplace
              mv $work/inplace $work/inplace2; mv $work/inplace.txt $work/inplace2.txt ;;
    pool-all) POOL_BASETEMP=$work/pool-base XDIST=${XDIST:-4} bash scripts/gpu/two-gpus.sh "$out" pool-all
              keep_planted ;;
    pool-all-start)
      rm -f $work/pool-all.done; mkdir -p $work/bg-out  # the background run's env.txt
      POOL_BASETEMP=$work/pool-base XDIST=${XDIST:-4} POOL_LIMIT=${POOL_LIMIT:-1500} setsid bash -c \
        "bash scripts/gpu/two-gpus.sh $work/bg-out pool-all; touch $work/pool-all.done" \
        >$work/pool-all-bg.log 2>&1 </dev/null &
      echo "pool-all started in its own session (pid $!)" ;;
    pool-all-wait)
      deadline=$((SECONDS + ${WAIT_LIMIT:-540}))
      while [ ! -f $work/pool-all.done ] && [ $SECONDS -lt $deadline ]; do sleep 5; done
      if [ -f $work/pool-all.done ]; then tail -3 $work/pool-all.txt; keep_planted
      else echo "pool-all still running after ${WAIT_LIMIT:-540} s: wait again"; fi ;;
    pool-n1)
      wall=$(sed -n 's/^rc [0-9]* wall \([0-9]*\) s$/\1/p' $work/inplace4.txt | tail -1)
      [ -n "$wall" ] || { echo "pool-n1: run inplace4 first (its wall time is the limit)"; continue; }
      XDIST=1 POOL_LIMIT=$((wall + ${N1_MARGIN:-10})) bash scripts/gpu/two-gpus.sh "$out" pool-all
      mv $work/pool-all.txt $work/pool-n1.txt; mv $work/pool-all.xml $work/pool-n1.xml 2>/dev/null ;;
    ledger-ab) bash scripts/gpu/ledger-ab.sh "$work/ledger-ab" ;;
    bench)
      for i in $(seq "${BENCH_RUNS:-2}"); do
        timeout 120 python3 -m rankgate.cli bench harness --backend nccl --worlds 2 4 --k 100 \
          --spawn-k 1 --json >>$work/harness_nccl.txt 2>&1; echo "run $i rc $?" >>$work/harness_nccl.txt
      done
      grep -h "ms by phase\|plain test" $work/harness_nccl.txt
      start=$SECONDS
      timeout "${COMM_LIMIT:-200}" python3 -m rankgate.bench.comm --world 4 -b 1K -e 64M -f 4 --iters 20 --reps 5 \
        --rounds 1 --out $work/comm-w4 >$work/comm-w4.txt 2>&1
      echo "comm rc $? wall $((SECONDS - start)) s" | tee -a $work/comm-w4.txt ;;
    *) echo "unknown step $s" ;;
  esac
done
tar -czf "$out/results.tgz" -C $work .
