"""How an in-place rank stops the run: its test outlived its timeout (the hang watch),
a stop signal came (the signal watch), peers died during an exchange, or another rank
stopped the run.

The first three end the process: the thread that claims the stop (``StopGate``) writes
the rank's last record (``lastrecord``) and the rank exits, since a process stuck in a
collective cannot be freed any other way; meanwhile the main thread parks. The last one
ends the session in order (``end_gracefully``): the rest "not run" at its end.

A signal with no dead peer behind it marks the JUnit file interrupted
(``rankgate.interrupted``): merge-junit and the report then say INCOMPLETE.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from typing import NoReturn

import pytest

from rankgate.harness import divergence, ledger, verdict_lines
from rankgate.harness.inplace import control, hang
from rankgate.harness.inplace.lastrecord import STORE_TIMEOUT_WHEN_STOPPING, LastRecord
from rankgate.harness.inplace.peers import Peers
from rankgate.harness.inplace.records import RankRecords
from rankgate.harness.inplace.running import RunningTest, StopGate
from rankgate.harness.inplace.schedule import Schedule
from rankgate.harness.verdict_lines import INTERRUPTED_PREFIX


def _crashed(ranks: Sequence[int]) -> str:
    """How a rank that ended inside a test without sending its result is named."""
    return (
        f"{verdict_lines.ranks(ranks)} crashed (ended without a result: os._exit, a signal or "
        "the OOM killer)"
    )


def _signal_cause(signum: int, rank: int, dead: list[int]) -> str:
    """Why a signal stops this rank: a peer's crash behind it, or the launcher, the CI
    or Ctrl-C."""
    name = signal.Signals(signum).name
    if dead:
        return f"{_crashed(dead)}, and the launcher sent {name} to rank {rank}"
    who = "the launcher or the CI stopped the job"
    if signum == signal.SIGINT:
        who = "Ctrl-C, or the launcher passing it on"
    return f"rank {rank} received {name} ({who})"


class RunStop:
    """The stop of one in-place rank's run (see the module doc)."""

    def __init__(
        self,
        channel: control.ControlChannel,
        *,
        gate: StopGate,
        running: RunningTest,
        schedule: Schedule,
        peers: Peers,
        records: RankRecords,
        last: LastRecord,
        members: Callable[[], tuple[int, ...]],
        on_problem: Callable[[str, str], None],
    ) -> None:
        """``members()``: the global ranks of the current group, in order (a sub-world's
        ledgers name global ranks); ``on_problem(nodeid, text)``: for the run's end."""
        self.control, self.gate, self.running = channel, gate, running
        self.schedule, self.peers, self.records, self.last = schedule, peers, records, last
        self.members, self.on_problem = members, on_problem
        self.rank = channel.rank
        self.aborted: str | None = None
        """Why another rank stopped the run, which this rank's session then ends."""
        self.cut_short = False
        """A launcher's signal or a peer's crash stops this rank: its summary waits for
        no other rank's tally (SIGKILL may follow)."""

    def on_timeout(self, item: pytest.Item, stacks: str, why: str) -> None:
        """From the hang watcher, just before this rank exits: record, tell, wait."""
        self.gate.begun.set()
        if not self.gate.claim():
            self.gate.stay()  # a signal is stopping this rank: it records and exits
        reason = f"rank {self.rank} stopped the run: {item.nodeid} {why}"
        plan, nodeid = self.schedule, item.nodeid
        key = plan.store_key(nodeid, self.running.attempt)
        ranks = plan.ranks_of(nodeid)  # a sub-world's ranks only
        mine = divergence.renumbered(ledger.now(), self.members())
        hints = (
            plan.every_rank_hint(nodeid, mine, False),
            plan.every_rank_hint(nodeid, mine, True),
        )
        self.records.log_ledger(item, mine)
        own_text, shown_text = hang.describe(
            self.control, item, stacks, why, reason=reason, key=key, ranks=ranks, mine=mine,
            hints=hints,
        )  # fmt: skip
        self.last.write(item, reason, own_text, verdict="hung", shown_text=shown_text)

    def on_signal(self, signum: int) -> None:
        """From the signal watch: a launcher (or CI) stops this rank; record, tell, exit."""
        with self.gate.verdict_lock:  # this test's verdict is shown by the main thread or here
            self.gate.begun.set()
            item = self.running.item
        if not self.gate.claim():
            return  # the hang watch is stopping this rank already, and exits when done
        self.cut_short = True
        try:
            self.control.store.set_timeout(STORE_TIMEOUT_WHEN_STOPPING)
            self.control.set(control.stopped_key(self.rank), signal.Signals(signum).name)
            dead = self.peers.dead_after_signal()
        except Exception:
            dead = []  # the store went with the launcher: say only what this rank knows
        cause = _signal_cause(signum, self.rank, dead)
        where = f"while {item.nodeid} ran" if item is not None else "between tests"
        note = self._in_flight_note() if dead and item is not None else ""
        if dead and item is not None and not set(dead) & set(self.schedule.ranks_of(item.nodeid)):
            # Another sub-world's rank died: this rank's test is not to blame. It is
            # recorded "not run" with the rest, naming the crash.
            item, note = None, ""
        if dead and item is not None:  # merge-junit compares what the peers left
            self._log_ledger(item)
        text, verdict = f"{cause} {where}{note}", "crashed"
        if not dead:  # no rank failed: the run was cut short, and its files must say so
            self.last.interrupted = (text, item)
            text, verdict = f"{INTERRUPTED_PREFIX}{text}", "interrupted"
        self.last.write(item, f"{cause} {where}", text, verdict=verdict, gone=dead)
        os._exit(128 + signum)

    def for_crashed_peers(self, item: pytest.Item, dead: list[int]) -> NoReturn:
        """Peers died in this test without a result (os._exit, a signal, the OOM killer):
        record it and end now, as when the launcher's signal says so, without waiting for
        that signal (mpirun's SIGKILL follows its SIGTERM within a second)."""
        self.gate.begin()
        if not self.gate.claim():
            self.gate.stay()  # a signal's watcher records this rank and exits it
        self.cut_short = True
        cause = f"{_crashed(dead)} while {item.nodeid} ran"
        self._log_ledger(item)
        self.last.write(item, cause, cause + self._in_flight_note(), verdict="crashed", gone=dead)
        os._exit(pytest.ExitCode.TESTS_FAILED)

    def end_gracefully(self, item: pytest.Item, reason: str) -> None:
        """Another rank stopped the run: finish this session, the rest as not run."""
        reason = self.control.abort(reason)  # a timeout here stops the others too
        self.aborted = reason
        self.on_problem(item.nodeid, reason)
        item.session.shouldstop = f"rankgate: {reason}"

    def stopping(self) -> bool:
        """Whether this rank's run stops, in order or not."""
        return self.aborted is not None or self.gate.begun.is_set()

    def _log_ledger(self, item: pytest.Item) -> None:
        """This rank's ledger of ``item``, which a peer's death ended: merge-junit reads
        the peers' ledgers for the verdict (the dead rank's died with it)."""
        try:
            mine = divergence.renumbered(ledger.now(), self.members())
            self.records.log_ledger(item, mine)
        except Exception:
            pass  # a verdict without the ledgers still stands

    def _in_flight_note(self) -> str:
        """'; rank 0 was in all_reduce #1 (float32[4]) issued at x.py:9': the collective
        this rank's test did not complete when a peer died ('' when none)."""
        waiting = divergence.in_flight(ledger.now())
        if waiting is None:
            return ""
        return f"; rank {self.rank} was in {divergence.describe(waiting)}"
