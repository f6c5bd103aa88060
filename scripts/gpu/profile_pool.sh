#!/usr/bin/env bash
# Where a pool's per-test time goes: N trivial world(2) tests under cProfile, the
# controller (python -m cProfile) and each rank (a profiler started by
# rankgate_worker_setup, dumped every second). Usage: scripts/gpu/profile_pool.sh OUT BACKEND [N]
set -uo pipefail
out=$1; backend=$2; n=${3:-300}
dir=$(mktemp -d)
cat >"$dir/test_trivial.py" <<PY
import pytest, torch, torch.distributed as dist

@pytest.mark.world(2, backend="$backend")
@pytest.mark.parametrize("i", range($n))
def test_trivial(i, rank, device):
    t = torch.ones(1, device=device)
    dist.all_reduce(t)
    assert t.item() == 2
PY
cat >"$dir/rgprof.py" <<'PY'
import cProfile, os, threading, time

def start(rank):
    profile = cProfile.Profile()
    profile.enable()
    def dump():
        while True:
            time.sleep(1.0)
            profile.disable()
            profile.dump_stats(os.path.join(os.environ["PROF_DIR"], f"rank{rank}.prof"))
            profile.enable()
    threading.Thread(target=dump, daemon=True).start()
PY
printf '[pytest]\nrankgate_worker_setup = rgprof:start\n' >"$dir/pytest.ini"
export PROF_DIR=$out PYTHONPATH=$dir${PYTHONPATH:+:$PYTHONPATH}
start=$(date +%s.%N)
(cd "$dir" && python3 -m cProfile -o "$out/controller.prof" -m pytest -q -p no:cacheprovider \
   -p no:randomly test_trivial.py >"$out/pytest.txt" 2>&1)
echo "rc $? wall $(python3 -c "print(round($(date +%s.%N) - $start, 2))") s for $n tests"
tail -1 "$out/pytest.txt"
for f in controller rank0; do
  python3 -c "
import pstats, sys
s = pstats.Stats('$out/$f.prof'); s.sort_stats('tottime').print_stats(18)
s.sort_stats('cumulative').print_stats(30)" >"$out/$f.top.txt" 2>&1
done
