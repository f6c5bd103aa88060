"""What rank 0's terminal says at an in-place run's end, below pytest's own summary: the
tests that failed on other ranks, and under torchrun, which ranks failed which tests
(torchrun's "Root Cause" that follows names the first rank to exit)."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from rankgate.harness import verdict_lines
from rankgate.harness.inplace.verdict import (
    DISAGREE_PREFIX,
    Judged,
    Results,
    cross_rank_problem,
)
from rankgate.harness.verdict_lines import NOT_RUN_PREFIX
from rankgate.launch.env import LaunchEnv


class Problem(NamedTuple):
    """A test that failed (or whose ranks disagreed) on another rank than this one; with
    no node id, why another rank stopped the run."""

    nodeid: str
    text: str


class RunNotes:
    """What the run's end says beyond pytest's own summary, noted as the run goes."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.failed_tests: list[tuple[str, list[int]]] = []
        """Each failed test's node id and the ranks that failed it."""
        self.lines: dict[str, str] = {}
        """A failed test's verdict in one line, as merge-junit words it: a rank that did
        not run the test names it so."""

    def add(self, nodeid: str, text: str) -> None:
        """A problem to name at the end (no node id: why another rank stopped the run)."""
        self.problems.append(Problem(nodeid, text))

    def add_failed(self, nodeid: str, ranks: list[int]) -> None:
        self.failed_tests.append((nodeid, ranks))

    def note_verdict(self, nodeid: str, judged: Judged) -> None:
        """The ranks that failed a test, and what the other ranks add to its verdict."""
        if judged.failed:
            self.add_failed(nodeid, judged.failed)
            # as a rank outside the test words it: every rank that failed it is another's
            said = cross_rank_problem(judged.everyone, rank=-1) or ""
            self.lines[nodeid] = said.split("\n", 1)[0]
        if judged.problem is not None:
            self.add(nodeid, judged.problem)

    def note_attempts(self, nodeid: str, everyone: Results, own) -> None:
        """A flaky test failed by policy fails on every rank: the last line counts it."""
        if any(r.failed for r in own) and not any(
            res.outcome in ("failed", "error") for res in everyone.values()
        ):
            self.add_failed(nodeid, list(everyone))

    def a_peer_stopped_the_run(self) -> bool:
        """A problem without a test: another rank stopped the run."""
        return any(not p.nodeid for p in self.problems)


def write_end(tr, config: pytest.Config, launch: LaunchEnv, notes: RunNotes) -> None:
    """The failures on other ranks (each rank's terminal shows its own), then the
    torchrun line."""
    problems, failed_tests = notes.problems, notes.failed_tests
    if problems:
        tr.section("rankgate: failures on other ranks", sep="=", red=True, bold=True)
    for nodeid, text in problems:
        if not nodeid:  # another rank stopped the run (in a test this rank did not run)
            tr.write_line(f"rankgate: {text.splitlines()[0]}", red=True)
            continue
        # pytest's word for the test: no rank failed a test whose ranks disagree;
        # merge-junit's for a test another sub-world's stop left unrun
        word = "ERROR" if text.startswith(DISAGREE_PREFIX) else "FAILED"
        if text.startswith(NOT_RUN_PREFIX):
            word, text = "NOT RUN", text.removeprefix(NOT_RUN_PREFIX)
        where = _cwd_relative(config, nodeid)  # as pytest's own summary says it
        tr.write_line(f"{word} {where}: {text.splitlines()[0]}")
    _torchrun_note(tr, launch, failed_tests)


def _cwd_relative(config: pytest.Config, nodeid: str) -> str:
    """A node id relative to where pytest was started (pytest 9.2 takes a NodeId)."""
    try:
        from _pytest.nodeid import coerce_node_id
    except ImportError:  # before pytest 9.2: a str
        return config.cwd_relative_nodeid(nodeid)
    return str(config.cwd_relative_nodeid(coerce_node_id(nodeid)))


def _torchrun_note(tr, launch: LaunchEnv, failed_tests: list[tuple[str, list[int]]]) -> None:
    """Rank 0's line under torchrun, in its summary: torchrun's own summary follows
    the run, and its "Root Cause" is the first rank to exit: every rank exits 1 when
    any rank failed a test, so that rank is often not the one that failed."""
    if launch.launcher != "torchrun" or launch.rank != 0 or not failed_tests:
        return
    ranks = sorted({r for _, bad in failed_tests for r in bad})
    ids = ", ".join(nodeid for nodeid, _ in failed_tests[:3])
    more = ", ..." if len(failed_tests) > 3 else ""
    tr.write_line(
        f"rankgate: {verdict_lines.count(len(failed_tests), 'test')} failed on "
        f'{verdict_lines.ranks(ranks)}: {ids}{more} (torchrun\'s "Root Cause" after the run '
        "is the first rank to exit, not the rank that failed: every rank exits 1 when any "
        "rank fails a test)",
        red=True,
    )
