"""pytest-cov across ranks (issue 59): the lines world tests ran on their ranks count,
in the pool, under ``-n`` and in place, with the same figure as each other.

Before: in the pool the ranks were not measured (the module's distributed function
showed as missing: 42% here); under torchrun both ranks combined the same files at
once and rank 1 died with INTERNALERROR "no such table: main.file" (torchrun failed).
"""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from rankgate.launch.launchers import launcher_argv
from tests.warmstart import WARM_PYTHON

pytest.importorskip("pytest_cov")

pytestmark = [pytest.mark.dist, pytest.mark.launches]

OPS = """
import torch


def plain(x):
    return x + 1


def distributed_sum(x):
    import torch.distributed as dist

    t = torch.tensor([float(x)])
    dist.all_reduce(t)
    if t.item() > 1000:
        return -1
    value = t.item()
    doubled = value * 2
    return doubled / 2
"""

TESTS = """
import pytest
from pkg import ops


def test_plain():
    assert ops.plain(1) == 2


@pytest.mark.world(2, backend="gloo")
def test_sum(rank):
    assert ops.distributed_sum(rank + 1) == 3
"""

# Every line but `return -1` (line 14), whichever way the test ran.
EXPECTED = re.compile(r"^pkg/ops\.py\s+12\s+1\s+92%\s+14$", re.MULTILINE)


def _project(path: Path) -> Path:
    (path / "pkg").mkdir()
    (path / "pkg" / "__init__.py").write_text("")
    (path / "pkg" / "ops.py").write_text(textwrap.dedent(OPS).lstrip())
    (path / "test_ops.py").write_text(textwrap.dedent(TESTS))
    (path / "pytest.ini").write_text("[pytest]\n")
    return path


def _run(path: Path, *prefix: str, args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    cmd = [
        *prefix, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q",
        "--cov=pkg", "--cov-report=term-missing", *args, "test_ops.py",
    ]  # fmt: skip
    return subprocess.run(cmd, cwd=path, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["pool", "pool-n2"])
def test_pool_ranks_count_in_the_coverage_report(tmp_path, xdist):
    proc = _run(_project(tmp_path), WARM_PYTHON.executable(), args=xdist)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert EXPECTED.search(proc.stdout), proc.stdout
    assert not list(tmp_path.glob(".coverage.*")), "every rank's data file was combined"


@pytest.mark.torch_dist
@pytest.mark.slow
@pytest.mark.parametrize("nproc", ["2", "4"])  # at 4, the world(2) test runs in a sub-world
def test_in_place_each_rank_saves_and_rank_0_reports_once(tmp_path, nproc):
    torchrun = launcher_argv("torchrun", int(nproc), WARM_PYTHON.executable())
    proc = _run(_project(tmp_path), *torchrun)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "INTERNALERROR" not in out
    assert len(EXPECTED.findall(out)) == 1, out  # rank 0's report only
    assert not list(tmp_path.glob(".coverage.*")), "every rank's data file was combined"
    assert not list(tmp_path.glob("*.rankgate-*")), "the ranks' markers were removed"
