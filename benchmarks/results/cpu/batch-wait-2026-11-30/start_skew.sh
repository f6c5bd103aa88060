#!/usr/bin/env bash
# How far apart a world(2) test's two ranks start its body, in the pool: 501 trivial
# world(2) tests (torch.ones, one all_reduce), each rank writing time.perf_counter()
# (CLOCK_MONOTONIC, one clock for every process) as its body starts; the first test
# (the pool's start) is left out. Prints the median, p90 and mean of |rank 0 - rank 1|.
# Usage: start_skew.sh [PYTHON]   (run from anywhere; the installed rankgate is used)
set -euo pipefail
python=${1:-python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/test_skew.py" <<'PY'
import os, time
import pytest
import torch
import torch.distributed as dist

@pytest.mark.world(2, backend="gloo")
@pytest.mark.parametrize("i", range(501))
def test_trivial_w2(i, rank, device):
    started = time.perf_counter()
    with open(os.path.join(os.environ["SKEW_DIR"], f"rank{rank}.txt"), "a") as f:
        f.write(f"{i} {started}\n")
    t = torch.ones(1, device=device)
    dist.all_reduce(t)
    assert t.item() == 2
PY
printf '[pytest]\n' >"$work/pytest.ini"
(cd "$work" && SKEW_DIR=$work "$python" -m pytest -q -p no:cacheprovider -p no:randomly test_skew.py | tail -1)
"$python" - "$work" <<'PY'
import statistics, sys
from pathlib import Path
starts = [dict(l.split() for l in (Path(sys.argv[1]) / f"rank{r}.txt").read_text().splitlines()) for r in (0, 1)]
skew = sorted(abs(float(starts[0][i]) - float(starts[1][i])) * 1e6 for i in starts[0] if i != "0")
print(f"start skew us: median {statistics.median(skew):.0f} p90 {skew[int(0.9 * len(skew))]:.0f} mean {statistics.mean(skew):.0f} ({len(skew)} tests)")
PY
