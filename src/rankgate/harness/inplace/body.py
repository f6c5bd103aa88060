"""Around one in-place test's own phases on this rank: its set-up's seed, its body's
default group and timeout, what it leaves behind, and the notes on its failure.

A hang here would block every rank: the hang watch dumps every stack and the rank stops
the run (``stop``), so the launcher tears the job down instead of waiting for the CI's
global timeout. A failure is marked in the store at once, so a peer still in the test
learns it (and gets PEER_GRACE_S more at most).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from rankgate.errors import RankgateError
from rankgate.harness import ledger
from rankgate.harness.aftertest import AfterTestCheck
from rankgate.harness.failure_repr import failure_repr
from rankgate.harness.inplace import control, schedule
from rankgate.harness.inplace.group import InPlaceGroup
from rankgate.harness.inplace.hangwatch import HangWatch
from rankgate.harness.inplace.running import RunningTest
from rankgate.harness.item_settings import (
    collective_timeout,
    seed_for_test,
    skip_at_test,
    test_timeout,
    world_spec,
)
from rankgate.harness.rankstate import (
    EnvironmentSnapshot,
    breaks_process_group,
    hint_for,
    needs_default_group,
    reset_state,
    same_examples_on_every_rank,
    seed_everything,
)

OnTimeout = Callable[[pytest.Item, str, str], None]
"""What a hang calls: the running test, every thread's stacks, why (``RunStop.on_timeout``)."""


def add_section(report: pytest.TestReport, title: str, text: str) -> None:
    """Append a titled section to a failure report, whatever shape its longrepr has."""
    if hasattr(report.longrepr, "addsection"):
        report.longrepr.addsection(title, text)
    elif isinstance(report.longrepr, str):
        report.longrepr += f"\n{text}"


class AfterTestProblem(RankgateError, AssertionError):
    """A test that lost the process group or left processes running. Its report is its
    text alone: the frames of the hook that raised it say nothing of the test."""


class TestBody:
    """The hooks around one test's phases on this rank (see the module doc)."""

    __test__ = False  # not a test class, whatever pytest's python_classes say

    def __init__(
        self,
        channel: control.ControlChannel,
        group: InPlaceGroup,
        hang_watch: HangWatch,
        *,
        running: RunningTest,
        plan: schedule.Schedule,
        on_timeout: OnTimeout,
        reproduce: Callable[[pytest.Item], str],
        skip_reason: Callable[[pytest.Item], str | None],
        default_timeout: float,
        base_seed: int,
    ) -> None:
        self.control, self.group, self.hang_watch = channel, group, hang_watch
        self.running, self.plan = running, plan
        self.on_timeout, self.reproduce, self.skip_reason = on_timeout, reproduce, skip_reason
        self.default_timeout, self.base_seed = default_timeout, base_seed

    def timeout_of(self, item: pytest.Item) -> float:
        """Seconds before the test counts as hung."""
        return test_timeout(item, self.default_timeout)

    def store_key(self, item: pytest.Item) -> int | str | None:
        """The running attempt of ``item`` in store keys (``Schedule.store_key``)."""
        return self.plan.store_key(item.nodeid, self.running.attempt)

    def setup(self, item: pytest.Item) -> None:
        """Before the test's own set-up: a skip known now; a world test's seed."""
        reason = self.skip_reason(item)
        if reason is not None:
            skip_at_test(reason)
        if world_spec(item) is not None:
            seed = seed_for_test(self.base_seed, item.nodeid)
            seed_everything(seed)
            same_examples_on_every_rank(getattr(item, "obj", None), seed)

    def run_step(self, item: pytest.Item, seconds: float, what: str, step) -> None:
        """``step()`` before the test's own timeout starts, under ``seconds`` of its own
        (an adopted set-up): past them this rank stops the run as for a hang, naming
        ``what``."""
        self.hang_watch.arm(
            seconds, on_timeout=lambda stacks, why: self.on_timeout(item, stacks, why), what=what
        )
        try:
            step()
        finally:
            self.hang_watch.disarm()

    def around_call(self, item: pytest.Item):
        """A wrapper of pytest_runtest_call: the body under the hang watch, on the
        default group its world marker asks for; afterwards what a pool's rank undoes."""
        timeout = self.timeout_of(item)
        key = self.store_key(item)
        self.hang_watch.arm(
            timeout,
            on_timeout=lambda stacks, why: self.on_timeout(item, stacks, why),
            peer_failed=None if key is None else lambda: self._peer_failed(item, key),
        )
        check = AfterTestCheck()
        saved_env, saved_cwd = EnvironmentSnapshot(), os.getcwd()
        spec = world_spec(item)
        backend = spec.backend if spec is not None else self.group.backend
        try:
            with self.group.default_group_for(backend, collective_timeout(timeout)):
                return (yield)
        finally:
            # a test that destroyed its default group
            self.running.group_trouble |= self.group.lost()
            try:
                # What a pool's rank undoes after every test (environment, cwd, default
                # dtype; subgroups after the exchange): a world test finds the same process
                # here. Still under the test's timeout, as the pool's task is: its CUDA
                # synchronize waits for the body's GPU work, which an NCCL collective the
                # peers called differently never finishes.
                if spec is not None:
                    reset_state(saved_env, saved_cwd)
            finally:
                self.hang_watch.disarm()
            problems = check.problems(self.group.current != schedule.NO_GROUP, item.funcargs)
            if problems:
                raise AfterTestProblem("\n".join(problems))

    def _peer_failed(self, item: pytest.Item, key: int | str) -> str | None:
        """What the hang watch polls: "rank N failed" for the first peer that failed, or
        "rank N stopped the run" once one of the test's ranks did (it timed out first: a
        rank whose test began later must answer its hang's questions within their wait)."""
        ranks = self.plan.ranks_of(item.nodeid)
        failed = self.control.failed_peers(key, ranks)
        if failed:
            return f"rank {failed[0]} failed"
        stopper = self.control.stopped_by(ranks)
        return f"rank {stopper} stopped the run" if stopper is not None else None

    def around_report(self, item: pytest.Item, call):
        """A wrapper of pytest_runtest_makereport: a failure marked in the store at once,
        with its reproduction line and a hint."""
        report = yield
        excinfo = call.excinfo
        if excinfo is not None and breaks_process_group(excinfo.value):
            self.running.group_trouble = True
        if excinfo is not None and isinstance(excinfo.value, AfterTestProblem):
            report.longrepr = failure_repr(item, str(excinfo.value))  # no hook frames
        if not report.failed:
            return report
        key = self.store_key(item)
        if key is not None and report.when in ("setup", "call"):
            self.control.set(control.failed_key(key, self.control.rank), True)
        add_section(report, "rankgate reproduce", self.reproduce(item))
        hint = hint_for(excinfo.value) if excinfo is not None else ""
        if excinfo is not None and report.when == "call":
            exc = excinfo.value
            in_group = breaks_process_group(exc) or needs_default_group(exc)
            hint = self.plan.every_rank_hint(item.nodeid, ledger.now(), in_group) or hint
        if hint:
            add_section(report, "rankgate hint", hint)
        return report
