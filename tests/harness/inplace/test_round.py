"""Each test's round in place (round.py), driven without a launcher: one pytest process
told it is rank 0 of a world of 1 (``--rankgate-mode=inplace`` takes the variables as
they are), its store a FileStore in tmp_path. Its rounds run, exchange with the one rank,
judge, rerun and record as under torchrun."""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.warmstart import WARM_PYTHON

pytestmark = pytest.mark.unit

SUITE = """\
import os
from pathlib import Path

import pytest


@pytest.mark.world(1)
def test_passes(rank, world_size):
    assert (rank, world_size) == (0, 1)


@pytest.mark.world(1)
def test_fails():
    assert False, "always"


@pytest.mark.world(1)
def test_flaky():
    marker = Path(os.environ["ROUND_MARKS"]) / "flaky"
    if not marker.exists():
        marker.write_text("")
        assert False, "the first attempt"


def test_plain(rank, world_size):
    assert (rank, world_size) == (0, 1)
"""


def _run_in_place(folder: Path, *args: str) -> subprocess.CompletedProcess:
    (folder / "test_suite.py").write_text(SUITE)
    (folder / "marks").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT")}
    env.update(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
        RANKGATE_STORE=str(folder / "store"), ROUND_MARKS=str(folder / "marks"),
    )  # fmt: skip
    command = [WARM_PYTHON.executable(), "-m", "pytest", "test_suite.py", "--rankgate-mode=inplace",
               "-p", "no:randomly", "-p", "no:cacheprovider", "--junitxml=out/junit.xml",
               *args]  # fmt: skip
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def _junit(path: Path) -> dict[str, tuple[str, set[str]]]:
    """Each test's outcome in a rank's JUnit file, and the names of its properties."""
    found = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        bad = [c.tag for c in case if c.tag in ("failure", "error", "skipped")]
        found[case.get("name")] = (
            bad[0] if bad else "passed",
            {p.get("name") for p in case.iter("property")},
        )
    return found


def test_each_round_runs_judges_reruns_and_records(tmp_path):
    proc = _run_in_place(tmp_path, "--rankgate-reruns=1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert "1 failed, 2 passed, 1 flaky" in last
    assert "FLAKY test_suite.py::test_flaky" in proc.stdout
    junit = _junit(tmp_path / "out" / "junit.rank0.xml")
    assert {name: outcome for name, (outcome, _) in junit.items()} == {
        "test_passes": "passed",
        "test_fails": "failure",
        "test_flaky": "passed",
        "test_plain": "passed",
    }
    # only a test that ran more than once records its attempts
    assert "rankgate.attempts" in junit["test_fails"][1]
    assert {"rankgate.attempts", "rankgate.flaky"} <= junit["test_flaky"][1]
    assert "rankgate.attempts" not in junit["test_passes"][1]
    # the round's results file goes once the JUnit file holds everything; the run's plan
    # stays beside it (merge-junit names a test whose ranks left no file)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "junit.rank0.ledger",
        "junit.rank0.plan",
        "junit.rank0.xml",
    ]


def test_x_stops_the_run_after_the_first_failed_round(tmp_path):
    # The tests the stop left are "not run" in the rank's files (merge-junit names every
    # collected test once) and errors on its terminal, as after any stop in place.
    proc = _run_in_place(tmp_path, "-x")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "stopping after 1 failures (counted on every rank)" in proc.stdout
    assert "1 failed, 1 passed, 2 errors" in proc.stdout.strip().splitlines()[-1]
    junit = _junit(tmp_path / "out" / "junit.rank0.xml")
    assert {name: outcome for name, (outcome, _) in junit.items()} == {
        "test_passes": "passed",
        "test_fails": "failure",
        "test_flaky": "error",
        "test_plain": "error",
    }
    assert not (tmp_path / "marks" / "flaky").exists()  # it never ran
