#!/usr/bin/env bash
# Where a pool test's wall time goes, sampled (py-spy, idle threads included) rather than
# traced: N trivial world(W) tests on BACKEND under `py-spy record --idle --subprocesses`,
# summarised per process by spy_summary.py. py-spy comes as a wheel in .whl (carried).
# Usage: scripts/gpu/spy-pool.sh OUT BACKEND WORLD [N]   (OUT/spy-BACKEND-wWORLD.{raw,txt})
set -uo pipefail
out=$1 backend=$2 world=$3 n=${4:-500}
[ -x /tmp/pyspy/bin/py-spy ] || python3 -m pip install -q --no-deps --target /tmp/pyspy .whl/py_spy*.whl
dir=$(mktemp -d)
cat >"$dir/test_trivial.py" <<PY
import pytest, torch, torch.distributed as dist

@pytest.mark.world($world, backend="$backend")
@pytest.mark.parametrize("i", range($n))
def test_trivial(i, rank, device):
    t = torch.ones(1, device=device)
    dist.all_reduce(t)
    assert t.item() == $world
PY
printf '[pytest]\n' >"$dir/pytest.ini"
name=spy-$backend-w$world
(cd "$dir" && /tmp/pyspy/bin/py-spy record --idle -r 1000 -f raw -o "$out/$name.raw" \
   --subprocesses -- python3 -m pytest -q -p no:cacheprovider -p no:randomly test_trivial.py \
   >"$out/$name.pytest.txt" 2>&1)
echo "$name rc $?: $(tail -1 "$out/$name.pytest.txt")"
python3 scripts/gpu/spy_summary.py "$out/$name.raw" 1000 >"$out/$name.txt" 2>&1
