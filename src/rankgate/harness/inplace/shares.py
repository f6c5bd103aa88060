"""In place, what one rank does with its share of the run (``schedule``): the ranks of
each test, the ``rank`` and ``world_size`` a test's body sees, meeting a new sub-world's
ranks, and learning at the end the failures of the tests other ranks ran."""

from __future__ import annotations

import pytest

from rankgate.harness import verdict_lines
from rankgate.harness.inplace import schedule
from rankgate.harness.inplace.control import PeerGone, RunAborted
from rankgate.harness.inplace.stop import EXIT_WAIT_S, SIGNAL_PEER_WAIT_S
from rankgate.harness.inplace.summary import Problem
from rankgate.harness.inplace.verdict import Judged, RankResult
from rankgate.harness.quarantine_plugin import QUARANTINE_PLUGIN
from rankgate.harness.shards.plugin import SHARD_PLUGIN
from rankgate.harness.spec import WorldSpec

MEET_TIMEOUT_S = 24 * 3600.0
"""How long the ranks of a new sub-world wait for each other: the others' tests of the
last phase end or time out (and stop the run) first."""


class Stopped(Exception):
    """The run stopped while this rank waited for a new sub-world."""


class ShareMixin:
    """The share-related part of ``InPlaceSession`` (its ``shares``, ``launch``,
    ``config``, ``control``, ``stop``, ``problems``, ``_failed_tests`` and ``tally``)."""

    run_tests = 0
    """How many tests the run has, over every rank's share."""

    @pytest.hookimpl(wrapper=True)
    def pytest_collection(self, session: pytest.Session):
        result = yield
        # pytest counts this rank's share: a rank whose share is empty would exit 5 (no
        # tests collected) and fail the launch; the run's tests are what it collected.
        session.testscollected = max(session.testscollected, self.run_tests)
        return result

    def ranks_of(self, nodeid: str) -> tuple[int, ...]:
        """The global ranks that run the test (every rank, for a test outside the plan)."""
        share = self.shares.get(nodeid)
        return tuple(range(self.launch.world_size)) if share is None else share.ranks

    def rank_in_test(self, item: pytest.Item) -> int:
        """The ``rank`` fixture: a world test's rank in its (sub-)world; 0 in a plain test
        shared out to one rank, as in the pool; the global rank in an every_rank test."""
        share = self.shares.get(item.nodeid)
        if share is not None and share.plain:
            return 0
        if share is None or not share.world_test:
            return self.launch.rank
        return share.local_rank(self.launch.rank)

    def world_in_test(self, item: pytest.Item) -> int:
        """The ``world_size`` fixture: a world test's (sub-)world size; 1 in a plain test
        shared out to one rank, as in the pool; the launched size in an every_rank test."""
        share = self.shares.get(item.nodeid)
        if share is not None and share.plain:
            return 1
        if share is None or not share.world_test:
            return self.launch.world_size
        return len(share.ranks)

    def every_rank_hint(self, item: pytest.Item, entries=None, in_collective=False) -> str:
        """``schedule.EVERY_RANK_HINT`` for a plain test shared out to one rank that used
        the default group (its ledger ``entries`` name it, or it hung or failed
        ``in_collective``, as any collective does there: it has no group), else ''."""
        share = self.shares.get(item.nodeid)
        if share is None or not share.plain:
            return ""
        used = any(e.get("group") in ("world", "p2p:world") for e in entries or ())
        return schedule.EVERY_RANK_HINT if used or in_collective else ""

    def device_for(self, spec: WorldSpec | None):
        """The ``device`` fixture: cuda:<local rank> on GPUs, cpu for gloo tests."""
        import torch

        device = self.group.device  # the sub-world's (inplace/subworld_env.py)
        if device is None or (spec is not None and spec.backend == "gloo"):
            return torch.device("cpu")
        return device

    def _meet(self, item: pytest.Item, share: schedule.Share) -> None:
        """Before a new sub-world's group: wait until each of its ranks is here (they
        may still run the last phase's tests), or until one of them stops the run."""
        phase, subworld = share.group
        try:
            self.control.all_gather(
                f"phase{phase}/subworld{subworld}/meet",
                True,
                ranks=share.ranks,
                timeout=MEET_TIMEOUT_S,
                gone=self.stop.ended_here,
            )
        except (RunAborted, TimeoutError) as exc:
            self._stop_gracefully(item, str(exc))
            raise Stopped from None
        except PeerGone as exc:
            self.stop.for_crashed_peers(item, exc.ranks)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """This rank's share has ended or stopped: the rest "not run" after a stop; the
        tally of what its terminal showed, for the others' last line; the others' failures."""
        if self._aborted is not None:
            self.records.report_not_run(self._aborted)  # before the JUnit file is written
        self.tally.publish()  # before the ranks meet: each then finds every tally
        if self._aborted is None:
            self._learn_others_failures()

    def _learn_others_failures(self) -> None:
        """The tests that failed on ranks that did not share them with this one, for
        its summary and exit status: each rank ran only its share (``schedule``)."""
        mine = [(nodeid, bad) for nodeid, bad in self._failed_tests if self._first_to_run(nodeid)]
        quarantine = self.config.pluginmanager.get_plugin(QUARANTINE_PLUGIN)
        outcomes = {} if quarantine is None else quarantine.outcomes
        quarantined = {n: said for n, said in outcomes.items() if self._first_to_run(n)}
        shards = self.config.pluginmanager.get_plugin(SHARD_PLUGIN)
        times = {} if shards is None else shards.times
        timed = {n: t for n, t in times.items() if self._first_to_run(n)}
        try:
            everyone = self.control.all_gather(
                "failures",
                (mine, quarantined, timed),
                timeout=MEET_TIMEOUT_S,
                gone=self.stop.ended_here,
            )
        except (RunAborted, TimeoutError) as exc:
            # Another sub-world's rank stopped the run after this rank's share had ended:
            # its terminal and exit status say so (its files say what it ran).
            self.problems.append(Problem("", str(exc)))
            return
        except PeerGone:
            return  # the launcher stops this rank next, naming the dead one
        for nodeid, bad in (failure for theirs, _, _ in everyone for failure in theirs):
            if self.launch.rank not in self.ranks_of(nodeid):
                self._failed_tests.append((nodeid, bad))
                self.problems.append(Problem(nodeid, f"{verdict_lines.ranks(bad)} failed"))
        # The quarantined tests and the times of the tests other ranks ran: rank 0 keeps
        # the quarantine's history and the durations file (--rankgate-store-durations).
        for _, theirs, their_times in everyone:
            for nodeid, said in theirs.items():
                if self.launch.rank not in self.ranks_of(nodeid):
                    outcomes[nodeid] = said
            for nodeid, seconds in their_times.items():
                if self.launch.rank not in self.ranks_of(nodeid):
                    times[nodeid] = seconds

    def _first_to_run(self, nodeid: str) -> bool:
        return self.ranks_of(nodeid)[0] == self.launch.rank

    # -- what the run's end says of each test ------------------------------------

    @pytest.hookimpl(wrapper=True, tryfirst=True, specname="pytest_terminal_summary")
    def pytest_terminal_summary_counts(self, terminalreporter):
        """Around pytest's summary: the tests other ranks ran are named (their failures,
        those not run) and counted in its last line (after pytest's short summary, which
        lists this rank's own)."""
        self.tally.learn(self._tally_wait(), self.stop.ended_here)
        named = {p.nodeid for p in self.problems}
        self.problems += [Problem(n, text) for n, text in self.tally.problems() if n not in named]
        with self.tally.summary_turn():  # one summary at a time (signalwatch's thread too)
            self.tally.count_out(terminalreporter)  # counted by a summary before this one
            result = yield
            self.tally.count_in(terminalreporter)
        return result

    def _tally_wait(self) -> float:
        """How long the summary waits for the other ranks' tallies: none once they all
        met at the end; after a stop, as long as another sub-world's test may still run;
        a second after a crash or a launcher's signal (its SIGKILL follows)."""
        if self.stop.cut_short:
            return SIGNAL_PEER_WAIT_S
        stopped = self._aborted is not None or self.stop.begun.is_set()
        if stopped or any(not p.nodeid for p in self.problems):
            return self.longest_timeout + EXIT_WAIT_S
        return 0.0

    def _note_attempts(self, item, everyone: dict[int, RankResult], own) -> None:
        """A flaky test failed by policy fails on every rank: the last line counts it."""
        if any(r.failed for r in own) and not any(
            res.outcome in ("failed", "error") for res in everyone.values()
        ):
            self._failed_tests.append((item.nodeid, list(everyone)))

    def _note_verdict(self, item: pytest.Item, judged: Judged) -> None:
        """What the run's end says of this test: the ranks that failed it, and what the
        other ranks add to its verdict."""
        if judged.failed:
            self._failed_tests.append((item.nodeid, judged.failed))
        if judged.problem is not None:
            self.problems.append(Problem(item.nodeid, judged.problem))
