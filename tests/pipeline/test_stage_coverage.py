"""A stage's coverage figure (issue 59): with pytest-cov asked for, the stage measures
every rank's lines, and its outcome, the gate's table and the report show the figure."""

from __future__ import annotations

import dataclasses
import json
import textwrap

import pytest

from rankgate.pipeline import executor, stages
from rankgate.pipeline.options import Options
from rankgate.report import present

pytest.importorskip("pytest_cov")

# dist: the stage's pytest runs a world test on a pool of its own
pytestmark = [pytest.mark.dist, pytest.mark.launches]

OPS = """
def distributed_sum(x):
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(x)])
    dist.all_reduce(t)
    if t.item() > 1000:
        return -1
    return t.item()
"""

TESTS = """
import pytest
from pkg import ops


@pytest.mark.world(2, backend="gloo")
def test_sum(rank):
    assert ops.distributed_sum(rank + 1) == 3
"""


class EveryNeedMet:
    def missing(self, need: str) -> None:
        return None


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "ops.py").write_text(textwrap.dedent(OPS).lstrip())
    (tmp_path / "test_ops.py").write_text(textwrap.dedent(TESTS))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    monkeypatch.chdir(tmp_path)  # the stage's pytest runs here, as a project's CI would
    return tmp_path


def _stage() -> stages.Stage:
    argv = ("pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "test_ops.py")
    command = stages.Command(argv=argv)
    return dataclasses.replace(stages.get("dist"), markers="", needs=(), commands=(command,))


def test_the_stage_measures_every_ranks_lines_and_shows_the_figure(project):
    options = Options(out_dir=project / "out", pytest_args=("--cov=pkg",))
    outcome = executor.run_stage(_stage(), options, EveryNeedMet())
    # 8 statements; only `return -1` is missed (12.5% if the pool's ranks were not counted:
    # the body ran on them only)
    assert outcome.status == "passed", outcome.reason
    assert outcome.coverage == pytest.approx(87.5)
    recorded = json.loads((project / "out" / "stages" / "dist.json").read_text())
    assert recorded["coverage"] == pytest.approx(87.5)
    assert "coverage 87.5%" in executor.summary_table([outcome]).splitlines()[-2]
    assert present.stage_tests(recorded) == "1 passed, coverage 87.5%"  # report.html, summary.md
    assert not list(project.glob(".coverage*")), "the stage's data file is its own, under out/"


def test_a_run_without_coverage_shows_no_figure_an_earlier_run_left(project):
    stage = _stage()
    executor.run_stage(
        stage, Options(out_dir=project / "out", pytest_args=("--cov=pkg",)), EveryNeedMet()
    )
    outcome = executor.run_stage(stage, Options(out_dir=project / "out"), EveryNeedMet())
    assert outcome.status == "passed" and outcome.coverage is None
    assert "coverage" not in executor.summary_table([outcome])
