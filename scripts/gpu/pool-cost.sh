#!/usr/bin/env bash
# The pool's per-test cost on a GPU host, in one call: `bench harness` with its phases on
# NCCL and gloo at worlds 2 and 4 (alternated, twice), py-spy samples of 500 trivial
# tests (NCCL world 2 and 4, gloo world 2), and the comm sweep of issue 57 on the spawn
# path (`--world 4`) with its progress lines. Usage: scripts/gpu/pool-cost.sh OUT
set -uo pipefail
out=$1 o=/tmp/pool-cost
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
mkdir -p $o
. scripts/gpu/install.sh $o/install.log
{ nvidia-smi --query-gpu=name,driver_version --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version())"
  uptime; nproc; } >$o/env.txt 2>&1
for i in ${RUNS:-1 2}; do
  for backend in nccl gloo; do
    timeout 120 python3 -m rankgate.cli bench harness --backend $backend --worlds 2 4 --k 100 \
      --spawn-k 1 --json >>$o/harness-$backend.txt 2>&1; echo "run $i rc $?" >>$o/harness-$backend.txt
  done
done
bash scripts/gpu/spy-pool.sh $o nccl 2 >>$o/spy.log 2>&1
bash scripts/gpu/spy-pool.sh $o nccl 4 >>$o/spy.log 2>&1
[ -n "${GLOO_SPY:-}" ] && bash scripts/gpu/spy-pool.sh $o gloo 2 >>$o/spy.log 2>&1
rm -f $o/*.raw
start=$SECONDS
timeout 200 python3 -m rankgate.bench.comm --world 4 -b 1K -e 64M -f 4 --iters 20 --reps 5 \
  --rounds 1 >$o/comm-spawn-w4.txt 2>&1
echo "comm rc $? wall $((SECONDS - start)) s" >>$o/comm-spawn-w4.txt
uptime >>$o/env.txt
tar -czf "$out/all.tgz" -C $o .
grep -h "ms by phase\|rc" $o/harness-*.txt; cat $o/spy.log; tail -1 $o/comm-spawn-w4.txt
