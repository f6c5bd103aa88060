"""World tests written as unittest classes, as pytest classes with class set-up, with
Hypothesis, or calling a trainer's own set-up: each runs on every rank, with the same
verdict (and the same hint) in the pool and in place."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import textwrap

import pytest
from jobs import run_torchrun_pytest

from rankgate.harness.rankstate import INIT_TWICE_HINT
from rankgate.report.junit import merge_junit

pytestmark = [pytest.mark.dist, pytest.mark.torch_dist]

STYLES = """
import unittest

import pytest
import torch
import torch.distributed as dist


def summed(value):
    t = torch.tensor([float(value)])
    dist.all_reduce(t)  # fails outside a rank: no process group there
    return t.item()


@pytest.mark.world(2)
class TestCaseOnRanks(unittest.TestCase):
    seen = []

    @classmethod
    def setUpClass(cls):
        cls.base = 5
        cls.seen.append("class")

    def setUp(self):
        self.x = 7

    def test_state_of_its_set_up(self):
        self.assertEqual((self.base, self.seen, self.x), (5, ["class"], 7))
        self.assertEqual(summed(1), 2.0)

    def test_fails_on_rank_1(self):
        self.assertNotEqual(dist.get_rank(), 1, "rank 1 is wrong")

    def test_skips_on_rank_1(self):
        if dist.get_rank() == 1:
            self.skipTest("rank 1 only")

    @unittest.skip("not today")
    def test_skipped(self):
        raise AssertionError("a skipped test ran")

    @unittest.expectedFailure
    def test_known_bad_on_rank_1(self):
        self.assertEqual(dist.get_rank(), 0)


@pytest.mark.world(2)
class TestAsyncCase(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.y = 3

    async def test_awaits(self):
        self.assertEqual(summed(self.y), 6.0)


@pytest.mark.world(2)
def test_trainer_setup_starts_its_own_group():
    dist.init_process_group("gloo")  # the group is rankgate's: a hint says what to do


@pytest.mark.world(2)
class TestClassSetUp:
    @classmethod
    def setup_class(cls):
        cls.base = 10

    @pytest.fixture(scope="class", autouse=True)
    def _more(self, request):
        request.cls.more = 1

    def test_sees_it(self):
        assert summed(self.base + self.more) == 22


"""

HYPOTHESIS = """
from hypothesis import HealthCheck, given, settings, strategies as st

@pytest.mark.world(2)
@settings(max_examples=20, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 5000))
def test_hypothesis_draws_the_same_sizes_on_every_rank(n, rank):
    t = torch.full((n,), float(rank))
    dist.all_reduce(t)  # a different n on each rank would not match
    assert t.sum().item() == n
"""
# Hypothesis comes with the dev extra; a machine without it (a GPU host's bare
# environment) runs the other styles.
HAS_HYPOTHESIS = importlib.util.find_spec("hypothesis") is not None
SOURCE = STYLES + (HYPOTHESIS if HAS_HYPOTHESIS else "")

# In the pool only: in place each rank runs setup_class itself, so nothing travels.
UNPICKLABLE_CLASS_STATE = """
@pytest.mark.world(2)
class TestUnpicklableClassState:
    @classmethod
    def setup_class(cls):
        import threading

        cls.lock = threading.Lock()

    def test_never_runs(self):
        pass
"""

VERDICTS = {
    "test_state_of_its_set_up": "passed",
    "test_fails_on_rank_1": "failed",
    "test_skips_on_rank_1": "error",
    "test_skipped": "skipped",
    "test_known_bad_on_rank_1": "xfailed",
    "test_awaits": "passed",
    "test_sees_it": "passed",
    "test_trainer_setup_starts_its_own_group": "failed",
}
if HAS_HYPOTHESIS:
    VERDICTS["test_hypothesis_draws_the_same_sizes_on_every_rank"] = "passed"
PASSED = list(VERDICTS.values()).count("passed")


def test_each_style_runs_on_every_rank_in_the_pool(inner, hypothesis_plugin_in_inner_runs):
    # Before: a unittest class's methods ran once, in the controller (no process
    # group there), and what setup_class set was missing on the ranks; Hypothesis drew
    # different sizes on each rank, so gloo aborted on the mismatch.
    result = inner(SOURCE + UNPICKLABLE_CLASS_STATE)
    result.assert_outcomes(passed=PASSED, failed=2, errors=2, skipped=1, xfailed=1)
    result.stdout.fnmatch_lines_random(
        [
            "rank 1 failed; rank 0 passed*",
            "AssertionError: 1 == 1 : rank 1 is wrong",
            "ranks disagree*: rank 1 skipped; rank 0 passed",
            "ERROR*test_skips_on_rank_1 - ranks disagree*",
            "ERROR*TestUnpicklableClassState::test_never_runs - rankgate: *",
            "SKIPPED*not today",
            "XFAIL*test_known_bad_on_rank_1*",
            "rankgate: TestUnpicklableClassState.lock (lock) cannot be sent into the ranks: "
            "TypeError: cannot pickle '_thread.lock' object. setup_class, setUpClass and "
            "class-scoped fixtures run once in the controller*",
        ]
    )


@pytest.mark.slow  # torchrun runs of its own
def test_each_style_has_the_pools_verdict_in_place_and_in_merge_junit(
    tmp_path, hypothesis_plugin_in_inner_runs
):
    # run from the tests' folder under the project's root, as `cd tests && pytest` does
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_styles.py").write_text(textwrap.dedent(SOURCE))
    pytest_args = ["-q", "-rfEsx", "test_styles.py"]
    pool = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *pytest_args],
        cwd=tests, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    in_place = run_torchrun_pytest(tests, *pytest_args, "--junitxml=out/junit.xml", timeout=120)
    # rank 0's list of what other ranks failed names tests as pytest's summary does
    assert (
        "ERROR test_styles.py::TestCaseOnRanks::test_skips_on_rank_1: ranks disagree" in in_place.stdout
    )
    for proc in (pool, in_place):
        last = proc.stdout.strip().splitlines()[-1]
        counts = {
            word: int(n)
            for n, word in re.findall(r"(\d+) (passed|failed|error|skipped|xfailed)", last)
        }
        assert counts == {"passed": PASSED, "failed": 2, "error": 1, "skipped": 1, "xfailed": 1}, (
            proc.stdout + proc.stderr
        )
        assert INIT_TWICE_HINT in proc.stdout
    merged = merge_junit(sorted((tests / "out").glob("junit.rank*.xml")))
    assert {t.name: t.verdict for t in merged.tests} == VERDICTS
