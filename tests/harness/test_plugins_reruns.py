"""pytest-rerunfailures beside rankgate (issue 59): ``--reruns N`` on a world test means
``--rankgate-reruns N`` (each attempt on a fresh world); ``@pytest.mark.flaky`` on one
is refused, naming ``--rankgate-reruns``. Plain tests keep pytest-rerunfailures's reruns.

Before, pytest-rerunfailures ran a failed world test's protocol again in the controller
(in place: on the same, possibly stuck, world), outside rankgate's attempts: no FLAKY
verdict, no attempts in the report.
"""

from __future__ import annotations

import textwrap

import pytest
from jobs import run_torchrun_pytest

pytest.importorskip("pytest_rerunfailures")

pytestmark = [pytest.mark.dist, pytest.mark.launches]

PLANTED = """
import pytest

def _attempt(tmp_path, rank):
    counter = tmp_path / f"attempts-rank{rank}"
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    return n

@pytest.mark.world(2, backend="gloo")
def test_world_flaky(rank, dist_tmp_path):
    assert not (rank == 1 and _attempt(dist_tmp_path, rank) == 1), "rank 1 fails its first attempt"

COUNT = []

def test_plain_flaky():
    COUNT.append(1)
    assert len(COUNT) > 1, "fails its first attempt"
"""


def test_reruns_option_reruns_world_tests_on_a_fresh_world(inner):
    result = inner(PLANTED, "--reruns", "1", "-p", "no:randomly")
    assert result.ret == 0, result.stdout.str()
    # the world test: rankgate's attempts; the plain one: pytest-rerunfailures's rerun
    assert result.parseoutcomes() == {"flaky": 1, "passed": 1, "rerun": 1}
    result.stdout.fnmatch_lines(
        [
            "*rankgate: tests run more than once (--rankgate-reruns)*",
            "FLAKY test_inner.py::test_world_flaky",
            "    attempt 1 failed: rank 1 failed; rank 0 passed (world 2, backend gloo)",
            "    attempt 2 passed",
        ]
    )
    result.stdout.fnmatch_lines(["test_inner.py ~R. *"])  # world: flaky; plain: rerun, pass


def test_rankgate_reruns_wins_over_reruns(inner):
    result = inner(PLANTED, "--reruns", "1", "--rankgate-reruns", "0", "-p", "no:randomly")
    assert result.parseoutcomes() == {"failed": 1, "passed": 1, "rerun": 1}


def test_flaky_marker_on_a_world_test_is_refused(inner):
    result = inner(
        """
import pytest

@pytest.mark.world(2)
@pytest.mark.flaky(reruns=2)
def test_w(rank):
    pass
"""
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: test_inner.py::test_w: @pytest.mark.flaky (pytest-rerunfailures) on a world "
         "test would rerun it*--rankgate-reruns N*"]
    )  # fmt: skip


@pytest.mark.torch_dist
@pytest.mark.slow
def test_reruns_option_in_place_is_rankgates(tmp_path):
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(PLANTED))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    proc = run_torchrun_pytest(
        tmp_path, "-p", "no:randomly", "-q", "--reruns", "1", "test_suite.py::test_world_flaky",
        timeout=300,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "1 flaky" in out, out
    assert "attempt 1 failed: rank 1 failed; rank 0 passed" in out, out
