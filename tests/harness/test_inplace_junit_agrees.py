"""In place, each rank's JUnit file says what the pool's says of a world test (its
world and backend, ``rankgate.world`` and ``rankgate.backend``), and merge-junit keeps
them; and one run names its stopping rank one way: two ranks whose test timed out at
once each stopped the run, and each named itself (stderr "rank 1 stopped the run",
rank 0's not-run records and merge-junit "rank 0").
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from jobs import run_torchrun_pytest

from rankgate.report.junit import merge_junit
from tests.once import once_per_run

pytestmark = [pytest.mark.dist, pytest.mark.torch_dist]

SUITE = """
import time
import pytest
import torch
import torch.distributed as dist


@pytest.mark.world(2, backend="gloo")
def test_world(rank):
    pass


@pytest.mark.world(2, timeout=5)
def test_hangs(rank):
    if rank == 0:
        dist.all_reduce(torch.zeros(1))
    else:
        time.sleep(1000)  # both ranks time out at once: each stops the run


@pytest.mark.world(2)
def test_after(rank):
    pass


def test_plain():
    pass
"""


def _properties(case) -> dict[str, str]:
    return {p.get("name"): p.get("value") for p in case.iter("property")}


@pytest.fixture(scope="module")
def run(request, tmp_path_factory):
    """The suite under torchrun, once per run (tests/once.py): its folder and the run."""

    def launch():
        path = tmp_path_factory.mktemp("agrees")
        (path / "test_suite.py").write_text(SUITE)
        (path / "pytest.ini").write_text("[pytest]\nrankgate_rendezvous_timeout = 2\n")
        proc = run_torchrun_pytest(
            path, "-p", "no:randomly", "-q", "--junitxml=out/junit.xml", "test_suite.py",
            timeout=240,
        )  # fmt: skip
        assert proc.returncode == 1, proc.stdout + proc.stderr
        return path, proc

    return once_per_run(request, launch)


def test_in_place_junit_names_world_and_backend_as_the_pool_does(run, tmp_path):
    path, _ = run
    for rank_file in sorted((path / "out").glob("junit.rank*.xml")):
        cases = {c.get("name"): c for c in ET.parse(rank_file).getroot().iter("testcase")}
        world = _properties(cases["test_world"])
        assert (world.get("rankgate.world"), world.get("rankgate.backend")) == ("2", "gloo")
        if "test_plain" in cases:  # a plain test ran on one rank, on no world
            assert "rankgate.world" not in _properties(cases["test_plain"])
    merged = merge_junit(sorted((path / "out").glob("junit.rank*.xml")), world_size=2)
    merged.write_xml(tmp_path / "merged.xml")  # the run's folder is shared: left as it is
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "merged.xml").getroot().iter("testcase")}
    world = _properties(cases["test_world"])
    assert (world.get("rankgate.world"), world.get("rankgate.backend")) == ("2", "gloo")


def test_one_run_names_one_stopping_rank(run):
    path, proc = run
    texts = [proc.stdout, proc.stderr]
    texts += [p.read_text() for p in sorted((path / "out").glob("junit.rank*.xml"))]
    merged = merge_junit(sorted((path / "out").glob("junit.rank*.xml")), world_size=2)
    texts += [t.message for t in merged.tests]
    named = {int(r) for text in texts for r in re.findall(r"rank (\d) stopped the run", text)}
    assert len(named) == 1, named
    (stopper,) = named
    not_run = {t.name: t.message for t in merged.tests if t.verdict == "not run"}
    assert set(not_run) == {"test_after", "test_plain"}, not_run
    said = f"rank {stopper} stopped the run: test_suite.py::test_hangs"
    assert all(said in message for message in not_run.values()), not_run
    for rank in (0, 1):
        assert f"[rank {rank}] rankgate: rank {stopper} stopped the run" in proc.stderr, proc.stderr
