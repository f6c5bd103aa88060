"""How an in-place rank's session ends: its share ran (or a peer stopped the run), what
the others ran is learnt, the summary counts the whole run, the ranks leave together.

Each rank runs only its share (``schedule``). At the end each publishes what its
terminal showed (``tally``) and learns the failures of the tests the others ran, so
rank 0's summary, last line and exit status speak for the run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rankgate.harness import verdict_lines
from rankgate.harness.inplace import summary
from rankgate.harness.inplace.control import ControlChannel, PeerGone, RunAborted, exited_key
from rankgate.harness.inplace.peers import EXIT_WAIT_S, SIGNAL_PEER_WAIT_S, Peers
from rankgate.harness.inplace.records import RankRecords
from rankgate.harness.inplace.round import MEET_TIMEOUT_S
from rankgate.harness.inplace.schedule import Schedule
from rankgate.harness.inplace.stop import RunStop
from rankgate.harness.inplace.tally import RunTally
from rankgate.harness.quarantine_plugin import QUARANTINE_PLUGIN
from rankgate.harness.rerun_report import RERUN_PLUGIN
from rankgate.harness.shards.plugin import SHARD_PLUGIN
from rankgate.launch.env import LaunchEnv


class RunEnd:
    """The end of one rank's session (see the module doc)."""

    def __init__(
        self,
        config: pytest.Config,
        launch: LaunchEnv,
        channel: ControlChannel,
        *,
        plan: Schedule,
        records: RankRecords,
        tally: RunTally,
        stop: RunStop,
        peers: Peers,
        notes: summary.RunNotes,
    ) -> None:
        self.config, self.launch, self.control = config, launch, channel
        self.plan, self.records, self.tally = plan, records, tally
        self.stop, self.peers, self.notes = stop, peers, notes

    def share_ended(self, session: pytest.Session) -> None:
        """This rank's share has ended or stopped: the rest "not run" after a stop (a
        peer's, or -x/--maxfail's here); the tally of what its terminal showed, for the
        others' last line; the others' failures, and their -x stop."""
        stopped = self.stop.aborted or session.shouldfail
        if stopped:
            self.records.report_not_run(str(stopped))  # before the JUnit file is written
        self.tally.publish()  # before the ranks meet: each then finds every tally
        if self.stop.aborted is None:
            self._learn_others_failures(session)

    def _learn_others_failures(self, session: pytest.Session) -> None:
        """The tests that failed on ranks that did not share them with this one, for
        its summary and exit status, and the stop of a sub-world that -x or --maxfail
        ended (its share's later tests are "not run"), for its stop line; the
        quarantine's outcomes and the durations of the tests other ranks ran (rank 0
        keeps the quarantine's history and the durations file)."""
        first, lines = self.plan.first_to_run, self.notes.lines
        mine = [(n, bad, lines.get(n, "")) for n, bad in self.notes.failed_tests if first(n)]
        quarantine = self.config.pluginmanager.get_plugin(QUARANTINE_PLUGIN)
        outcomes = {} if quarantine is None else quarantine.outcomes
        shards = self.config.pluginmanager.get_plugin(SHARD_PLUGIN)
        times = {} if shards is None else shards.times
        said = (mine, {n: o for n, o in outcomes.items() if first(n)},
                {n: t for n, t in times.items() if first(n)}, session.shouldfail)  # fmt: skip
        try:
            everyone = self.control.all_gather(
                "failures", said, timeout=MEET_TIMEOUT_S, gone=self.peers.ended_here
            )
        except (RunAborted, TimeoutError) as exc:
            # Another sub-world's rank stopped the run after this rank's share had ended:
            # its terminal and exit status say so (its files say what it ran).
            self.notes.add("", str(exc))
            return
        except PeerGone:
            return  # the launcher stops this rank next, naming the dead one
        for theirs, their_outcomes, their_times, their_stop in everyone:
            for nodeid, bad, line in theirs:
                if not self._ran_here(nodeid):
                    self.notes.add_failed(nodeid, bad)
                    self.notes.add(nodeid, line or f"{verdict_lines.ranks(bad)} failed")
            outcomes.update((n, o) for n, o in their_outcomes.items() if not self._ran_here(n))
            times.update((n, t) for n, t in their_times.items() if not self._ran_here(n))
            if their_stop and not session.shouldfail:  # pytest's terminal says it
                session.shouldfail = their_stop

    def _ran_here(self, nodeid: str) -> bool:
        return self.launch.rank in self.plan.ranks_of(nodeid)

    def around_summary(self, terminalreporter):
        """A wrapper of pytest's summary: the tests other ranks ran are named (their
        failures, those not run, those run more than once) and counted in its last line
        (after pytest's short summary, which lists this rank's own)."""
        self.tally.learn(self._tally_wait(), self.peers.ended_here)
        named = {p.nodeid for p in self.notes.problems}
        for nodeid, text in self.tally.problems():
            if nodeid not in named:
                self.notes.add(nodeid, text)
        reruns = self.config.pluginmanager.get_plugin(RERUN_PLUGIN)
        if reruns is not None:  # the others' tests run more than once, named as merge-junit does
            reruns.add_others(self.tally.reruns(), self.plan.place)
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
        if self.stop.stopping() or self.notes.a_peer_stopped_the_run():
            return self.plan.longest_timeout + EXIT_WAIT_S
        return 0.0

    def write_summary(self, terminalreporter) -> None:
        """Below pytest's summary: the failures on other ranks, the torchrun line."""
        summary.write_end(terminalreporter, self.config, self.launch, self.notes)

    def exit_status(self, session: pytest.Session) -> None:
        """Last of the session's end: the results file goes (junitxml has written this
        rank's file by now); a failure on another rank or a stop fails this rank too."""
        self.records.close_results()
        if (self.notes.problems or self.stop.aborted) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def leave(self, shared_dirs, store_path: Path | None) -> None:
        """The ranks leave together; rank 0 removes what they shared (after a stop, a
        launcher stops every rank once one exits with a failure: the ranks of other
        sub-worlds first finish the test they are in)."""
        import torch.distributed as dist

        if self.stop.aborted is not None:
            self.control.set(exited_key(self.launch.rank), True)
            self.peers.wait_for_exit(finish_s=self.plan.longest_timeout)
            return
        if dist.is_initialized():
            dist.destroy_process_group()
        if not self.control.end_together():
            return
        if self.launch.rank == 0:
            shared_dirs.remove()
            if store_path is not None:
                store_path.unlink(missing_ok=True)
