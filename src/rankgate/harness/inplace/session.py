"""In-place mode: pytest was started on every rank by torchrun, srun or mpirun.

One process group for the session; test bodies run directly on every rank.
Only rank 0 writes to the terminal (rank r > 0 writes to ``pytest.rank<r>.log``),
each rank writes its own JUnit file (``<name>.rank<r>.xml``, with the rank and the
world size as properties), and after every test the ranks exchange their outcomes
(through the store, see ``control``) so rank 0's summary and exit status count a
failure on any rank. The ranks share the tests out (``schedule``): world(k) tests with k
below the launched world run in sub-worlds of k ranks, each plain test on one rank with
no process group (as in the pool's controller); a rank runs, records and exchanges only
its share, with the ranks of its share. world(k) with k above the launched world is
skipped with a reason.

Every rank shows and counts each test's cross-rank verdict (``verdict``), so
``-x``/``--maxfail`` stop every rank of a test after the same test; the ranks of other
sub-worlds finish their shares (a rank that waits for a stopped one stops too), every
rank's files name the tests it left "not run", and every terminal says the stop and
names the tests other sub-worlds ran (``ending``). Beside its JUnit file each
rank appends each test's outcome to its results file as the test ends (``records``,
``rankgate.harness.rankfiles``): a rank killed outright loses at most the test it was in, and
merge-junit reads the rest from that file.

A test that loses the group (destroys it, or breaks it with a backend error) fails,
and every rank joins a new group before the next test. A rank whose test hangs, or
outlives a failed peer by PEER_GRACE_S, and a rank that receives SIGTERM or SIGHUP (a
launcher stopping the survivors of a dead rank) or SIGINT (Ctrl-C), stops the run:
``stop`` records that test and every test not yet run, tells the other ranks and exits.

``InPlaceSession`` is the pytest plugin only: each hook goes to the part of the run
that does its job (``start.Parts``): the test's ``round``, its ``body``, the run's
``ending``.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from rankgate.harness import heap
from rankgate.harness.inplace import collection
from rankgate.harness.inplace.round import TestRound
from rankgate.harness.inplace.start import start
from rankgate.harness.spec import WorldSpec
from rankgate.launch.env import LaunchEnv


class InPlaceSession:
    """In-place mode's pytest hooks on one rank, each handed to the part that does it,
    and what the fixtures ask of the run (a test's rank, world, device, shared folder)."""

    def __init__(self, config: pytest.Config, launch: LaunchEnv) -> None:
        self.launch = launch
        self.parts = start(config, launch)
        self.run_id = self.parts.run_id
        self._collect_errors: list[str] = []

    # -- what the fixtures and the adopted set-ups ask --------------------------------

    def rank_in_test(self, item: pytest.Item) -> int:
        return self.parts.plan.rank_in_test(item.nodeid)

    def world_in_test(self, item: pytest.Item) -> int:
        return self.parts.plan.world_in_test(item.nodeid)

    def device_for(self, spec: WorldSpec | None):
        """The ``device`` fixture: cuda:<local rank> on GPUs, cpu for gloo tests."""
        import torch

        device = self.parts.group.device
        if device is None or (spec is not None and spec.backend == "gloo"):
            return torch.device("cpu")
        return device

    def shared_dir(self, nodeid: str) -> Path:
        """An empty directory for this test, the same on every rank that runs it."""
        plan = self.parts.plan
        return self.parts.shared_dirs.get(nodeid, plan.index.get(nodeid), plan.ranks_of(nodeid))

    def run_step(self, item: pytest.Item, seconds: float, what: str, step) -> None:
        """``step()`` under a timeout of its own (an adopted set-up: ``TestBody.run_step``)."""
        self.parts.body.run_step(item, seconds, what, step)

    # -- set-up and collection ----------------------------------------------------------

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.parts.records.start(session)
        self.parts.signals.start()

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            text = str(report.longrepr).strip().splitlines()
            self._collect_errors.append(f"{report.nodeid}: " + "\n    ".join(text[-12:]))

    @pytest.hookimpl(wrapper=True)
    def pytest_collection(self, session: pytest.Session):
        result = yield
        # pytest counts this rank's share: a rank whose share is empty would exit 5 (no
        # tests collected) and fail the launch; the run's tests are what it collected.
        session.testscollected = max(session.testscollected, self.parts.plan.run_tests)
        return result

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Every rank's tests made one (``collection``), then shared out (``schedule``)."""
        parts = self.parts
        where = (socket.gethostname(), os.getpid())
        mine = collection.collected(session, self._collect_errors, where)
        everyone = parts.kit.channel.all_gather("collected", mine)
        parts.peers.where = [c.where for c in everyone]
        collection.make_one(session, everyone, parts.log_dir)  # UsageError: they differ
        body = parts.body
        session.items[:] = parts.plan.make(session.items, body.skip_reason, body.timeout_of)
        parts.records.collected(
            session.items, parts.plan.ranks_of, parts.group.body_backend, parts.plan.planned
        )
        heap.keep_out_of_collections(tests_ran=False)  # the test modules are in, none ran

    # -- each test ------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem) -> bool:
        """The test's round: its phases unlogged, the exchange, then its records and
        the verdict (``round``)."""
        TestRound(self.parts.kit, item, nextitem).play()
        return True

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.parts.body.setup(item)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        return (yield from self.parts.body.around_call(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call):
        return (yield from self.parts.body.around_report(item, call))

    # -- the end ----------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.parts.end.share_ended(session)

    @pytest.hookimpl(wrapper=True, tryfirst=True, specname="pytest_terminal_summary")
    def pytest_terminal_summary_counts(self, terminalreporter):
        return (yield from self.parts.end.around_summary(terminalreporter))

    def pytest_terminal_summary(self, terminalreporter) -> None:
        self.parts.end.write_summary(terminalreporter)

    @pytest.hookimpl(trylast=True, specname="pytest_sessionfinish")
    def pytest_sessionfinish_last(self, session: pytest.Session) -> None:
        self.parts.end.exit_status(session)

    def pytest_unconfigure(self) -> None:
        self.parts.signals.stop()
        self.parts.end.leave(self.parts.shared_dirs, self.parts.group.store_path)
