"""In place, ranks on one host with different temp dirs get one warning at the start.

Reproduced on the CPU: torchrun starts each rank through a shell that gives it a
TMPDIR of its own, as a per-process temp-dir set-up does. On two GPUs that breaks
torch's symmetric memory ("Failed to send fd"); the warning names it before any test.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from jobs import run_torchrun_pytest

from tests.warmstart import WARM_PYTHON

# slow: starts torchrun and pytest on every rank
pytestmark = [pytest.mark.dist, pytest.mark.torch_dist, pytest.mark.slow]

SUITE = """
import pytest
import torch
import torch.distributed as dist

@pytest.mark.world(2)
def test_all_reduce(rank):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2
"""

PER_RANK_TMPDIR = 'mkdir -p "$BASE/rank$LOCAL_RANK" && TMPDIR="$BASE/rank$LOCAL_RANK" exec "$0" "$@"'


def _torchrun(tmp_path: Path, per_rank_tmpdir: bool) -> subprocess.CompletedProcess:
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(SUITE))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    base = tmp_path / "temp"
    base.mkdir()
    # torchrun and its ranks start from the warm ``python`` (torch imported); a rank's own
    # TMPDIR reaches it all the same (read when the rank first asks for its temp dir).
    python = WARM_PYTHON.executable()
    pytest_cmd = [python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_suite.py"]
    if per_rank_tmpdir:
        rank_cmd = ["--no-python", "sh", "-c", PER_RANK_TMPDIR, *pytest_cmd]
    else:
        rank_cmd = ["--no-python", *pytest_cmd]
    cmd = [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           *rank_cmd]  # fmt: skip
    env = {**os.environ, "BASE": str(base), "TMPDIR": str(base)}
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)


def test_ranks_with_their_own_temp_dirs_get_one_warning_naming_what_breaks(tmp_path):
    proc = _torchrun(tmp_path, per_rank_tmpdir=True)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    base = tmp_path / "temp"
    assert out.count("ranks on one host have different temp dirs") == 1, out
    assert f"rank 0 {base / 'rank0'}, rank 1 {base / 'rank1'}" in out, out
    assert "torch's symmetric memory" in out
    assert "Failed to send fd" in out
    assert "Give every rank on a host the same TMPDIR" in out
    assert "1 passed" in out


def test_ranks_that_share_a_temp_dir_get_no_warning(tmp_path):
    proc = _torchrun(tmp_path, per_rank_tmpdir=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "different temp dirs" not in proc.stdout
    assert "1 passed" in proc.stdout


BASETEMP_SUITE = """
import os
import pathlib

import pytest

@pytest.mark.every_rank  # each rank's own temp dirs
def test_plain_tmp_path(tmp_path_factory):
    rank = os.environ["RANK"]
    pathlib.Path(f"basetemp-rank{rank}").write_text(str(tmp_path_factory.getbasetemp()))
"""


@pytest.mark.parametrize("basetemp", [False, True], ids=["pytest-root", "basetemp"])
def test_each_rank_has_its_own_pytest_temp_dirs(tmp_path, basetemp):
    # Ranks that shared pytest's temp root removed its old dirs under each other
    # ("PytestWarning: (rm_rf) error removing ..."), one run in tens on a loaded host.
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(BASETEMP_SUITE))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    temp = tmp_path / "temp"
    temp.mkdir()
    chosen = ["--basetemp", str(tmp_path / "bt")] if basetemp else []
    env = {**os.environ, "TMPDIR": str(temp)}
    env.pop("PYTEST_DEBUG_TEMPROOT", None)
    proc = run_torchrun_pytest(tmp_path, "-q", *chosen, "test_suite.py", env=env, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rank0 = Path((tmp_path / "basetemp-rank0").read_text())
    rank1 = Path((tmp_path / "basetemp-rank1").read_text())
    if basetemp:
        assert (rank0, rank1) == (tmp_path / "bt", tmp_path / "bt-rank1")
    else:
        assert rank0.parent.parent == temp, rank0  # pytest's: <temp>/pytest-of-<user>/pytest-N
        assert rank1.parent.parent == temp / "pytest-rank1", rank1
