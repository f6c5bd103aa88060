#!/usr/bin/env bash
# A world test on NCCL that fails its first attempt on rank 1 only, run with
# --rankgate-reruns 2 in the pool and in place (torchrun), then merge-junit.
# Usage: scripts/gpu/flaky_nccl.sh OUTDIR   (expects "1 flaky", rc 0, and merge-junit's FLAKY line)
set -uo pipefail
out=$1 && mkdir -p "$out"
dir=$(mktemp -d)
cat >"$dir/test_flaky_nccl.py" <<'PY'
import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(2, backend="nccl")
def test_flaky(rank, device, tmp_path):
    counter = tmp_path / f"attempts-rank{rank}"
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    t = torch.ones(1, device=device)
    dist.all_reduce(t)
    assert t.item() == 2
    assert not (rank == 1 and n == 1), "rank 1 fails its first attempt"
PY
cd "$dir" || exit 1
python3 -m pytest -p no:cacheprovider -q -rA --rankgate-reruns 2 test_flaky_nccl.py >"$out/pool.txt" 2>&1
echo "pool rc $?" >>"$out/pool.txt"
torchrun --standalone --nproc-per-node 2 -m pytest -p no:cacheprovider -q -rA --rankgate-reruns 2 \
    --junitxml=out/junit.xml test_flaky_nccl.py >"$out/inplace.txt" 2>&1
echo "inplace rc $?" >>"$out/inplace.txt"
python3 -m rankgate.cli merge-junit --world 2 out >"$out/merge-junit.txt" 2>&1
echo "merge-junit rc $?" >>"$out/merge-junit.txt"
tail -2 "$out/pool.txt" "$out/inplace.txt" "$out/merge-junit.txt"
