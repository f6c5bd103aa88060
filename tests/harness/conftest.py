"""Runs small test files through the rankgate plugin and inspects what it reports."""

from __future__ import annotations

import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

# Imported before pytester snapshots sys.modules (torch cannot be imported twice).
import torch  # noqa: F401

import rankgate.harness.pool.worker  # noqa: F401
from tests.warmstart import WARM_PYTHON


class InnerRun:
    """One inner pytest session over a generated test file."""

    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester

    def __call__(self, source: str, *args: str, ini: str = "", subprocess: bool = False):
        self.pytester.makepyfile(test_inner=textwrap.dedent(source))
        self.pytester.makeini(f"[pytest]\n{textwrap.dedent(ini)}")
        run = (
            self.pytester.runpytest_subprocess if subprocess else self.pytester.runpytest_inprocess
        )
        return run("-p", "no:cacheprovider", "-rA", *args)

    def env_seen_per_xdist_worker(self, marker: str, variable: str) -> dict[str, set[str]]:
        """Run 4 tests marked ``marker`` on 2 xdist workers; ``variable`` as each worker's ranks saw it."""
        source = """
            import os
            import pytest

            @pytest.fixture
            def where(tmp_path_factory):
                out = tmp_path_factory.getbasetemp().parent / "where"
                out.mkdir(exist_ok=True)
                return out

            @pytest.mark.MARKER
            @pytest.mark.parametrize("i", range(4))
            def test_where(i, rank, where):
                name = f"{os.environ['PYTEST_XDIST_WORKER']}-{i}-{rank}"
                (where / name).write_text(os.environ[VARIABLE])
            """
        source = source.replace("MARKER", marker).replace("VARIABLE", repr(variable))
        base = self.pytester.path / "bt"
        # Room for both workers' pools at once: under a budget of one world (the CPUs
        # of a small machine) one worker would run all four tests on its pool.
        result = self(
            source, "-n", "2", "--rankgate-max-ranks=8", "--basetemp", str(base), subprocess=True
        )
        result.assert_outcomes(passed=4)
        seen: dict[str, set[str]] = {}
        for f in (base / "where").iterdir():
            seen.setdefault(f.name.split("-")[0], set()).add(f.read_text())
        return seen

    @staticmethod
    def properties(case) -> dict[str, str]:
        """A JUnit testcase's properties as a dict."""
        return {p.get("name"): p.get("value") for p in case.iter("property")}

    def junit(self, *args: str, source: str, ini: str = ""):
        """Run and return (result, {test name: testcase element})."""
        result = self(source, "--junitxml=junit.xml", *args, ini=ini)
        root = ET.parse(self.pytester.path / "junit.xml").getroot()
        return result, {case.get("name"): case for case in root.iter("testcase")}


@pytest.fixture
def auto_backend(auto_backend_for) -> str:
    """What ``world(2)`` resolves to on this host, where a launcher puts both ranks:
    ``cpu:gloo,cuda:nccl`` with two GPUs, gloo otherwise (pool and in place agree)."""
    return auto_backend_for(2)


@pytest.fixture
def auto_backend_for():
    """What ``world(k)`` resolves to on this host, for any k: the harness's own auto rule
    (``resolve_backend``) on the GPUs every process here sees. A test that expects a
    device or a backend of an auto world asks this, never assumes the CPU."""
    from rankgate.harness.pool.gpus import visible_gpu_count
    from rankgate.harness.spec import resolve_backend

    visible = visible_gpu_count()
    return lambda k: resolve_backend("auto", k, visible)


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester whose subprocess runs (``runpytest_subprocess``) start from this process's
    warm ``python`` (:mod:`warmstart`), as the launches of jobs.py do."""
    monkeypatch.setattr(pytester, "_getpytestargs", lambda: (WARM_PYTHON.executable(), "-mpytest"))
    return pytester


@pytest.fixture
def inner(pytester: pytest.Pytester) -> InnerRun:
    return InnerRun(pytester)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests that start pytest sessions or launchers of their own.

    Every test here that is not itself a world test checks the harness by running it
    (pytester, torchrun, mpirun); under a launcher each rank would run it once more, on
    the same GPUs and files, so in place the harness skips them (marker ``launches``).
    """
    from rankgate.harness.item_settings import SPEC_KEY

    here = Path(__file__).parent
    for item in items:
        if item.path.parent == here and item.stash.get(SPEC_KEY, None) is None:
            item.add_marker(pytest.mark.launches)
