"""One in-place test's round on this rank: enter the test's group, run an attempt,
exchange results with its other ranks, judge, rerun while every rank asks, record, show.

Each step is a method that returns the next one. ``TestRound.play`` hands each to the
stop gate (``running.StopGate``), the one place that minds a stop: a watcher thread may
begin one at any time (a hang, a launcher's signal), recording the test itself; the
gate then parks this thread after the step it is in, and a step that writes the
verdict does not run at all. A peer that stopped the run in order, or died, is met in
the exchanges (``_gather``).

With reruns the own reports wait for the exchange: only the last attempt's go into the
rank's files, with every attempt's record (``reruns``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from _pytest.runner import runtestprotocol
from _pytest.skipping import xfailed_key

from rankgate.harness import ledger
from rankgate.harness.inplace.control import ControlChannel, PeerGone, RunAborted
from rankgate.harness.inplace.group import InPlaceGroup
from rankgate.harness.inplace.peers import Peers
from rankgate.harness.inplace.records import RankRecords
from rankgate.harness.inplace.reruns import (
    attempt_of,
    properties,
    with_attempts,
    with_every_attempt,
)
from rankgate.harness.inplace.running import RunningTest, Step, StopGate, shows_verdict
from rankgate.harness.inplace.schedule import Schedule
from rankgate.harness.inplace.stop import RunStop
from rankgate.harness.inplace.summary import RunNotes
from rankgate.harness.inplace.verdict import (
    BAD,
    Judged,
    judged,
    own_result,
    verdict_reports,
    with_ledger,
)
from rankgate.harness.item_settings import collective_timeout, world_spec
from rankgate.harness.output import TERMINAL_LIMIT, clipped
from rankgate.harness.rankstate import destroy_subgroups

MEET_TIMEOUT_S = 24 * 3600.0
"""How long the ranks of a new sub-world wait for each other: the others' tests of the
last phase end or time out (and stop the run) first."""


class Stopped(Exception):
    """The run stopped while this rank waited for a new sub-world."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RoundKit:
    """What every round of the run works with, made once by the session."""

    channel: ControlChannel
    group: InPlaceGroup
    plan: Schedule
    records: RankRecords
    running: RunningTest
    gate: StopGate
    stop: RunStop
    peers: Peers
    notes: RunNotes
    timeout_of: Callable[[pytest.Item], float]
    reruns: int
    flaky_policy: str
    shows_passes: bool
    """-rA/-rP show a passed test's output: then every rank sends its output, not only a
    failure's, so rank 0's terminal shows all of them as the pool's does."""


class TestRound:
    """One test's round on this rank (see the module doc)."""

    __test__ = False  # not a test class, whatever pytest's python_classes say

    def __init__(self, kit: RoundKit, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        self.kit, self.item, self.nextitem = kit, item, nextitem
        # Longer than the hang watch's timeout, which ends a hang with stacks.
        self.seconds = collective_timeout(kit.timeout_of(item))
        self.share = kit.plan.share_of(item.nodeid)
        self.ranks = kit.plan.ranks_of(item.nodeid)
        self.exchanged = kit.plan.in_run(item.nodeid)
        self.holds = kit.reruns > 0 and self.exchanged
        self.body_backend = kit.group.backend
        self.own: list[pytest.TestReport] = []
        self.result: Judged | None = None
        """Every rank's result of the last attempt, judged (None: no exchange)."""
        self.attempts: list = []
        self.shown: list[pytest.TestReport] = []

    def play(self) -> None:
        """Every step in turn, each through the stop gate."""
        step: Step | None = self._enter
        while step is not None:
            step = self.kit.gate.run(step)

    def _enter(self) -> Step | None:
        """The test's group, made when this rank is not in it yet (meeting its other
        ranks first); none when another sub-world stopped the run: this test and the
        rest are recorded "not run" at the session's end."""
        kit, item = self.kit, self.item
        stopped = kit.channel.aborted()
        if stopped is not None and kit.stop.aborted is None:
            kit.stop.end_gracefully(item, stopped)
            return None
        if self.share is not None:  # its group, or none for a plain test (group.py)
            try:
                kit.group.enter(self.share, self._meet)
            except Stopped:
                return None
        spec = world_spec(item)
        self.body_backend = kit.group.ready(self.seconds, spec.backend if spec else None)
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        kit.running.begin(item)
        kit.records.begin(item)
        return self._attempt

    def _meet(self) -> None:
        """Before a new sub-world's group: wait until each of its ranks is here (they
        may still run the last phase's tests), or until one of them stops the run."""
        phase, subworld = self.share.group
        name = f"phase{phase}/subworld{subworld}/meet"
        if self._gather(name, True, timeout=MEET_TIMEOUT_S) is None:
            raise Stopped

    def _attempt(self) -> Step:
        """The test's phases, unlogged: the exchange comes first."""
        ledger.follow(self.body_backend)
        ledger.begin_test()
        reports = runtestprotocol(self.item, nextitem=self.nextitem, log=False)
        self.own = clipped(reports, TERMINAL_LIMIT)
        return self._exchange if self.holds else self._keep_own

    def _keep_own(self) -> Step:
        """This rank's own result into its results file now: a rank that dies in the
        exchange leaves it."""
        self.kit.records.log_own(self.item, self.own, junit=False)
        self.kit.running.own = self.own
        return self._exchange

    def _exchange(self) -> Step:
        """Every rank's result of the attempt, judged; a new group where any rank lost
        its own. A test outside the run's list, or a run stopped in order, has none."""
        kit, item = self.kit, self.item
        self.result = None
        if not self.exchanged or kit.stop.aborted is not None:
            return self._leave_subgroups
        kit.records.reached(item)
        mine = with_ledger(own_result(self.own, all_output=kit.shows_passes), kit.group.members)
        mine = mine._replace(group_trouble=kit.running.group_trouble)
        kit.running.group_trouble = False
        if mine.outcome in BAD:  # now: a peer that dies in the exchange ends this rank there
            kit.records.log_ledger(item, mine.ledger)
        key = kit.plan.store_key(item.nodeid, kit.running.attempt)
        # Each rank's value stays at control.outcome_key(key, rank): a hung peer reads it.
        gathered = self._gather(f"t{key}/outcome", tuple(mine))
        if gathered is None:
            return self._leave_subgroups
        self.result = judged(self.ranks, gathered, kit.channel.rank)
        if mine.outcome not in BAD and self.result.ledgers_compared:
            kit.records.log_ledger(item, mine.ledger)  # merge-junit compares them
        if not self.holds:  # else for the last attempt only
            kit.notes.note_verdict(item.nodeid, self.result)
        return self._renew_group if self.result.group_trouble else self._leave_subgroups

    def _renew_group(self) -> Step:
        """A rank lost or broke its group in this test: every rank joins a new one."""
        self.kit.group.renew()
        return self._leave_subgroups

    def _leave_subgroups(self) -> Step:
        """After the exchange every rank has finished the test: none is still connecting
        to a group this one destroys (see reset_state)."""
        destroy_subgroups(self.kit.group.kept_groups())
        return self._decide_rerun if self.holds else self._record_own

    @shows_verdict
    def _record_own(self) -> Step:
        """This rank's own reports into its JUnit file, unless a stop (a launcher's
        signal) records the test there first, naming them."""
        self.kit.records.log_own(self.item, self.own, results=False)
        self.kit.running.logged, self.kit.running.own = True, None
        return self._show

    def _decide_rerun(self) -> Step:
        """Another attempt on a new group, when the attempt failed, reruns are left and
        every rank says it can go again; else the attempts are recorded."""
        kit, result = self.kit, self.result
        if result is not None:
            n, marked = len(result.everyone), self.item.stash.get(xfailed_key, None) is not None
            self.attempts.append(
                attempt_of(
                    kit.running.attempt, result.everyone, n, kit.group.backend, marked=marked
                )
            )
        if result is None or not self._every_rank_reruns():
            return self._record_attempts
        kit.group.renew()  # never the group of a failed attempt: a new one
        kit.running.attempt += 1
        return self._attempt

    def _every_rank_reruns(self) -> bool:
        """Whether every rank runs the test again: it failed, reruns are left, and each
        rank says through the store that it can (so all ranks rerun, or none)."""
        if self.attempts[-1].verdict != "failed" or len(self.attempts) > self.kit.reruns:
            return False
        if world_spec(self.item) is None:  # a plain test runs once, as in a pool
            return False
        mine = self.kit.stop.aborted is None and not self.item.session.shouldstop
        index = self.kit.plan.store_key(self.item.nodeid)
        said = self._gather(f"t{index}/rerun{self.kit.running.attempt}", mine)
        return said is not None and all(said)

    @shows_verdict
    def _record_attempts(self) -> Step:
        """The last attempt's own reports, telling of every attempt, into this rank's
        files; its verdict and the attempts for the run's end."""
        kit, item = self.kit, self.item
        self.own = with_attempts(item, self.own, self.attempts, kit.flaky_policy)
        kit.records.log_own(item, self.own, properties(self.attempts, kit.flaky_policy))
        kit.running.logged = True
        if self.result is not None:
            kit.notes.note_verdict(item.nodeid, self.result)
            if len(self.attempts) > 1:
                kit.notes.note_attempts(item.nodeid, self.result.everyone, self.own)
        return self._show

    @shows_verdict
    def _show(self) -> Step:
        """The verdict across ranks, to the terminal and every plugin but JUnit's."""
        kit, item, own = self.kit, self.item, self.own
        shown = own
        if self.result is not None:
            shown = verdict_reports(item, own, self.result.everyone, kit.channel.rank)
        # A rerun test's failure shown with every attempt (a failure here has them already).
        if len(self.attempts) > 1 and not any(r.failed for r in own):
            shown = with_every_attempt(item, shown, self.attempts)
        for report in shown:
            kit.records.log_shown(report=report)
        kit.running.item = None
        self.shown = shown
        return self._finish

    def _finish(self) -> None:
        """-x and --maxfail count the verdict, alike on every rank of the test; the
        test ends."""
        item = self.item
        self.kit.records.count_failure(item, self.shown)
        if item.session.shouldfail:  # a rank that waits for this one stops waiting
            self.kit.channel.stop_here(str(item.session.shouldfail))
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)

    def _gather(self, name: str, value, *, timeout: float | None = None) -> list | None:
        """Every rank of the test's ``value`` for ``name``, in order; None when a rank
        stopped the run meanwhile (this rank's session then ends in order). A peer whose
        process ended stops the run here (``RunStop.for_crashed_peers``)."""
        kit = self.kit
        try:
            return kit.channel.all_gather(
                name,
                value,
                timeout=self.seconds if timeout is None else timeout,
                gone=kit.peers.ended_here,
                ranks=self.ranks,
            )
        except (RunAborted, TimeoutError) as exc:
            kit.stop.end_gracefully(self.item, str(exc))
            return None
        except PeerGone as exc:
            kit.stop.for_crashed_peers(self.item, exc.ranks)
