#!/usr/bin/env bash
# Where the time goes on a 4-GPU host, in one call: the pool's per-test cost on NCCL
# (`bench harness`, twice, worlds 2 and 4), a cProfile of 300 trivial world(2) NCCL tests
# (profile_pool.sh), and the comm sweep of issue 57 at world 4 under torchrun with each
# rank profiled (rankprof.py). Usage: scripts/gpu/profile-four.sh OUT   (OUT/all.tgz)
set -uo pipefail
out=$1 o=/tmp/profile-four
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
mkdir -p $o/pool $o/comm
. scripts/gpu/install.sh $o/install.log
{ nvidia-smi topo -m; nvidia-smi --query-gpu=name,driver_version --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version())"
  uptime; nproc; } >$o/env.txt 2>&1
for i in 1 2; do
  timeout 150 python3 -m rankgate.cli bench harness --backend nccl --worlds 2 4 --k 100 \
    --spawn-k 1 --json >>$o/harness.txt 2>&1; echo "harness run $i rc $?" >>$o/harness.txt
done
timeout 150 bash scripts/gpu/profile_pool.sh $o/pool nccl 300 >$o/pool/run.txt 2>&1
start=$(date +%s.%N)
timeout 240 torchrun --standalone --nproc-per-node=4 scripts/gpu/rankprof.py $o/comm \
  -m rankgate.bench.comm -b 1K -e 64M -f 4 --iters 20 --reps 5 --rounds 1 >$o/comm/run.txt 2>&1
echo "comm rc $? wall $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s" >>$o/comm/run.txt
for r in 0 1; do
  python3 -c "
import pstats
s = pstats.Stats('$o/comm/rank$r.prof'); s.sort_stats('cumulative').print_stats(45)
s.sort_stats('tottime').print_stats(25)" >$o/comm/rank$r.top.txt 2>&1
done
uptime >>$o/env.txt
tar -czf "$out/all.tgz" -C $o .
tail -3 $o/harness.txt $o/pool/run.txt $o/comm/run.txt
