"""How an in-place rank stops the run: its test outlived its timeout (the hang watch),
a stop signal came (the signal watch), or peers died during the exchange of outcomes.

One path records the stop (``_claim``): the watcher thread that got there first, or the
main thread. It records the test that was running and every test not yet run, writes
the JUnit file, prints the summary, ends this rank's children, tells the other ranks,
waits a little for them, and the rank exits: a process stuck in a collective cannot be
freed any other way. Meanwhile the main thread parks (``park_if_stopping``).

A signal with no dead peer behind it marks the JUnit file interrupted
(``rankgate.interrupted``): merge-junit and the report then say INCOMPLETE.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, Protocol

import pytest

from rankgate.harness import crashrecord, divergence, leaks, ledger, locks, options, verdict_lines
from rankgate.harness.failure_repr import failure_repr, item_report
from rankgate.harness.inplace import control
from rankgate.harness.inplace.reruns import no_rerun_note
from rankgate.harness.inplace.verdict import RankResult, own_result
from rankgate.harness.output import TERMINAL_LIMIT, clip_text
from rankgate.harness.stacks import where as stack_where
from rankgate.harness.verdict_lines import INTERRUPTED_PREFIX

if TYPE_CHECKING:
    from rankgate.harness.inplace.group import InPlaceGroup
    from rankgate.harness.inplace.hangwatch import HangWatch
    from rankgate.harness.inplace.records import RankRecords
    from rankgate.harness.inplace.tally import RunTally
    from rankgate.launch.env import LaunchEnv

EXIT_WAIT_S = 5.0
"""A rank that stops the run waits this long for the others to write their JUnit files."""
SIGNAL_PEER_WAIT_S = 1.0
"""After a stop signal, how long a rank waits to hear that each peer got it too; a peer
that says nothing (and whose process is gone, where it runs on this host) is dead."""
STORE_TIMEOUT_WHEN_STOPPING = timedelta(seconds=2)
"""The store may be gone with the launcher: a stopping rank never waits long on it."""
WHERE_WAIT_S = 2.0
"""A hung rank waits this long for the other hung ranks to say where they wait (the
ranks of one test time out together), to name the likely cause."""


def _own_result_note(own: list[pytest.TestReport] | None, rank: int) -> str:
    """What this rank's test had come to before the stop, for its JUnit ('' if unknown):
    its own failure (say gloo's 'Connection closed by peer' as the peer died) stays."""
    if own is None:
        return ""
    result = own_result(own)
    if result.outcome in ("failed", "error"):
        return f"\n\nrank {rank}'s own result before that: {result.outcome}\n" + result.text
    return f"\n\nrank {rank}'s own result before that: {result.outcome}"


def _crashed(ranks: Sequence[int], crashes=None) -> str:
    """How a rank that ended inside a test without sending its result is named (with the
    line it died on, where its crash record says)."""
    return crashrecord.crashed_words(ranks, crashes or {})


def end_children() -> None:
    """End every process this rank started (forkservers, pool workers, helpers):
    the rank exits now, and they would outlive it under PID 1."""
    tree, todo = [], [os.getpid()]
    while todo:
        found = list(leaks.children(todo.pop()))
        tree += found
        todo += found
    for sig, wait in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 0.0)):
        for pid in tree:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in tree):
            leaks.reap(tree)
            time.sleep(0.05)
        leaks.reap(tree)


@dataclass(slots=True)
class RunningTest:
    """The test the main thread runs, as a stopping watcher finds it."""

    item: pytest.Item | None = None
    own: list[pytest.TestReport] | None = None
    """Its own reports once in the results file, the JUnit's still to come: a stop during
    the exchange records its verdict in the JUnit with them (a peer's death, say)."""
    logged: bool = False
    """Its own reports are in the JUnit file already."""
    start: float = 0.0
    """time.monotonic() when it began: a stop's record of it keeps its duration."""

    def begin(self, item: pytest.Item) -> None:
        self.item, self.own, self.logged, self.start = item, None, False, time.monotonic()


class RunPlan(Protocol):
    """What a stop asks of the run's plan (the session's)."""

    longest_timeout: float
    """Of the run's tests: how long a peer may still be in one."""

    def ranks_of(self, nodeid: str) -> tuple[int, ...]: ...
    def store_index(self, item: pytest.Item) -> int | str | None: ...
    def ranks_that_failed(self, index: int) -> list[int]: ...
    def every_rank_hint(self, item: pytest.Item, entries=None, in_collective=False) -> str: ...
    def reproduction_line(self, item: pytest.Item) -> str: ...


class RunStop:
    """The stop state of one in-place rank (the session's ``stop``).

    Made once the rank has joined the group; it reads the run as it stands: the
    ``running`` test, the ``plan`` (which ranks run a test, its store index) and the
    rank's ``records``.
    """

    def __init__(
        self,
        config: pytest.Config,
        launch: LaunchEnv,
        channel: control.ControlChannel,
        group: InPlaceGroup,
        hang_watch: HangWatch,
        *,
        records: RankRecords,
        running: RunningTest,
        plan: RunPlan,
        tally: RunTally,
    ) -> None:
        self.config, self.launch = config, launch
        self.control, self.group = channel, group
        self.hang_watch = hang_watch
        self.records, self.running, self.plan = records, running, plan
        self.tally = tally
        self.reruns = options.reruns(config)
        self._lock = threading.Lock()
        self._stopping = False
        self.begun = threading.Event()
        """Set when a thread decides to stop the run, before it asks the store anything:
        the main thread then parks instead of going on (a new group's rendezvous with a
        peer that left blocks in C++ holding the GIL, which would freeze the watchers
        until the launcher's SIGKILL)."""
        self.verdict_lock = threading.Lock()
        """Held while the main thread shows a test's verdict and while a watcher takes
        the current test over: one of them reports it, never both."""
        self.peers: list[tuple[str, int]] = []
        """Each rank's (host, pid), learnt at collection."""
        self.interrupted: tuple[str, pytest.Item | None] | None = None
        """Why a signal cut the run short (no rank had failed), and the test it stopped."""
        self.cut_short = False
        """A launcher's signal or a peer's crash stops this rank: its summary waits for
        no other rank's tally (SIGKILL may follow)."""

    def on_timeout(self, item: pytest.Item, stacks: str, why: str) -> None:
        """From the hang watcher, just before this rank exits: record, tell, wait."""
        self.begun.set()
        if not self._claim():
            threading.Event().wait()  # a signal is stopping this rank: it records and exits
        rank = self.launch.rank
        reason = f"rank {rank} stopped the run: {item.nodeid} {why}"
        failed: dict[int, str] = {}
        mine = divergence.renumbered(ledger.now(), self.group.members)
        ledgers: dict[int, list | None] = {rank: mine}
        self.records.log_ledger(item, mine)
        finished: dict[int, str] = {}
        try:
            self.control.abort(reason)
            failed = self._failed_peers(item, ledgers)
            wheres = self._where_hung_ranks_wait(item, stacks, failed, ledgers)
            wheres = divergence.waits_per_ledger(wheres, ledgers)
            finished = self._finished_peers(item, ledgers, (*failed, *wheres))
        except Exception:  # the store is gone: name where this rank waits only
            wheres = {rank: stack_where(stacks, str(item.path))}
        notes = {"hung": f"{why}; the rank exited"}
        diverged = divergence.find(
            ledgers, now={r: str(w) for r, w in wheres.items() if w and w.collective is None}
        )
        if diverged is not None:  # the ledgers name the cause; the stacks only where ranks wait
            cause = divergence.cause_of(diverged, ledgers)
            table = divergence.side_by_side(ledgers, diverged) + "\n"
        else:
            cause, table = verdict_lines.hang_cause(wheres), ""
        headline = verdict_lines.with_cause(
            verdict_lines.outcomes_line({rank: "hung"}, notes=notes), cause
        )
        waits = wheres.get(rank) is not None and wheres[rank].collective is not None
        hint = self.plan.every_rank_hint(item, mine, waits)
        if hint:  # a plain test on one rank waits for ranks that never join it
            headline = f"{headline}; {hint}"
        own_body = f"{table}Python stacks of every thread:\n{stacks}"
        own_text = f"{headline}\n{own_body}"  # this rank's JUnit: its own outcome
        shown_text = None
        if failed or len(wheres) > 1 or finished:
            # The terminal names every rank's outcome, as the pool does: the peers that
            # failed (first, with their texts), every rank that said it hangs here, and
            # those that finished it (a rank the ledgers single out "diverged", never passed).
            outcomes = {**finished, **dict.fromkeys(failed, "failed")}
            outcomes = divergence.worded({**outcomes, **dict.fromkeys(wheres, "hung")}, diverged)
            sections = [f"--- rank {r}: failed ---\n{text}" for r, text in failed.items()]
            sections.append(f"--- rank {rank}: hung ---\n{own_body}" if failed else own_body)
            exited = "the ranks exited" if len(wheres) > 1 else "the rank exited"
            line = verdict_lines.with_cause(
                verdict_lines.outcomes_line(outcomes, notes={"hung": f"{why}; {exited}"}),
                cause,
            )
            shown_text = "\n".join([line, *sections])
        self._record(item, reason, own_text, verdict="hung", shown_text=shown_text)

    def _failed_peers(self, item: pytest.Item, ledgers: dict) -> dict[int, str]:
        """The other ranks that failed ``item``, with their failures' texts: the results
        they sent for the exchange, which they entered once the test ended there (their
        ledgers go into ``ledgers``)."""
        index = self.plan.store_index(item)  # this attempt's, after a rerun
        if index is None:
            return {}
        failed = {}
        for r in self.plan.ranks_that_failed(index):
            sent = self.control.peek(control.outcome_key(index, r))
            failed[r] = RankResult(*sent).text if sent is not None else ""
            ledgers[r] = RankResult(*sent).ledger if sent is not None else None
        return failed

    def _finished_peers(self, item: pytest.Item, ledgers: dict, known) -> dict[int, str]:
        """The other ranks of ``item`` (not ``known``) that finished it and sent their
        result (they wait in the exchange): their outcomes, and their ledgers into
        ``ledgers``."""
        index = self.plan.store_index(item)
        if index is None:
            return {}
        finished = {}
        for r in self.plan.ranks_of(item.nodeid):
            if r == self.launch.rank or r in known:
                continue
            sent = self.control.peek(control.outcome_key(index, r))
            if sent is not None:
                finished[r], ledgers[r] = RankResult(*sent).outcome, RankResult(*sent).ledger
        return finished

    def _claim(self) -> bool:
        """True for the one watcher (hang or signal) that records this rank's stop."""
        with self._lock:
            if self._stopping:
                return False
            self._stopping = True
            return True

    def on_signal(self, signum: int) -> None:
        """From the signal watch: a launcher (or CI) stops this rank; record, tell, exit."""
        with self.verdict_lock:  # this test's verdict is shown by the main thread or here
            self.begun.set()
            item = self.running.item
        if not self._claim():
            return  # the hang watch is stopping this rank already, and exits when done
        self.cut_short = True
        name = signal.Signals(signum).name
        rank = self.launch.rank
        try:
            self.control.store.set_timeout(STORE_TIMEOUT_WHEN_STOPPING)
            self.control.set(control.stopped_key(rank), name)
            dead = self._dead_peers()
        except Exception:
            dead = []  # the store went with the launcher: say only what this rank knows
        crashes = self.records.crashes(dead, str(item.path) if item is not None else None)
        if dead:
            cause = f"{_crashed(dead, crashes)}, and the launcher sent {name} to rank {rank}"
        else:
            who = "the launcher or the CI stopped the job"
            if signum == signal.SIGINT:
                who = "Ctrl-C, or the launcher passing it on"
            cause = f"rank {rank} received {name} ({who})"
        where = f"while {item.nodeid} ran" if item is not None else "between tests"
        note = self._in_flight_note() if dead and item is not None else ""
        if dead and item is not None and not set(dead) & set(self.plan.ranks_of(item.nodeid)):
            # Another sub-world's rank died: this rank's test is not to blame. It is
            # recorded "not run" with the rest, naming the crash.
            item, note = None, ""
        if dead and item is not None:  # merge-junit compares what the peers left
            self._log_ledger(item)
        stacks = crashrecord.stacks_section(crashes, self.records.crash_path)
        text, verdict = f"{cause} {where}{note}{stacks}", "crashed"
        if not dead:  # no rank failed: the run was cut short, and its files must say so
            self.interrupted = (text, item)
            text, verdict = f"{INTERRUPTED_PREFIX}{text}", "interrupted"
        self._record(item, f"{cause} {where}", text, verdict=verdict, gone=dead)
        os._exit(128 + signum)

    def _dead_peers(self) -> list[int]:
        """Peers that gave no sign after the stop signal and whose process is gone."""
        others = [r for r in range(self.launch.world_size) if r != self.launch.rank]
        deadline = time.monotonic() + SIGNAL_PEER_WAIT_S
        while True:
            silent = [
                r
                for r in others
                if not self.control.store.check([control.stopped_key(r)])
                and not self.control.store.check([control.exited_key(r)])
            ]
            gone = [r for r in silent if not self._may_be_running(r)]
            if gone == silent or time.monotonic() > deadline:
                return gone
            time.sleep(0.05)

    def _may_be_running(self, rank: int) -> bool:
        """False when ``rank``'s process is known to be gone (it runs on this host)."""
        if rank >= len(self.peers):
            return False
        host, pid = self.peers[rank]
        if host != socket.gethostname():
            return True  # cannot look; silence alone decides after SIGNAL_PEER_WAIT_S
        return leaks.running(pid)

    def _record(
        self,
        item: pytest.Item | None,
        reason: str,
        text: str,
        *,
        verdict: str,
        gone: Sequence[int] = (),
        shown_text: str | None = None,
    ) -> None:
        """Record ``item`` as failed with ``text`` (the terminal shows ``shown_text``
        when given), the rest as not run, write the JUnit file, print the summary, end
        this rank's children, tell the others, wait for them (but not for the ranks in
        ``gone``, whose processes are known to have ended).

        Runs in the thread that claimed the stop (a watcher, while the main thread is
        stuck or parked; or the main thread, when a peer's process ended during the
        exchange), so nothing else touches pytest's state; the session never finishes.
        """
        rank = self.launch.rank
        stuck = item is not None and verdict in ("hung", "crashed")  # not a CI's signal
        note = no_rerun_note(self.reruns) if stuck else ""
        if note:
            reason += note
            text += "\n" + note.strip(" ()")
            shown_text = None if shown_text is None else shown_text + "\n" + note.strip(" ()")
        # This rank exits next: a lock file that only its existence makes a lock (torch's
        # FileBaton) would hold every later run that takes it.
        held = locks.release(locks.survey([os.getpid(), *leaks.children()]), [])
        if held:
            text = f"{text}\n{held}"
            shown_text = None if shown_text is None else f"{shown_text}\n{held}"
            self.hang_watch.write(f"[rank {rank}] rankgate: {held}")
        capman = self.config.pluginmanager.get_plugin("capturemanager")
        captured = ("", "")
        if capman is not None:  # the test's output so far, and the terminal back for us
            try:
                capman.suspend_global_capture(in_=True)
                captured = capman.read_global_capture()
            except Exception:
                pass
        try:
            self.control.store.set_timeout(STORE_TIMEOUT_WHEN_STOPPING)
            agreed = self.control.abort(reason)
            if verdict == "hung":  # one stopping rank: another's, if its test hung first
                reason = agreed  # (a signal reaches every rank: each names its own)
        except Exception:
            pass  # the store is gone; the others learn it from the launcher
        if item is not None:
            own = self.running.own if item is self.running.item else None
            report = self._stop_report(item, text + _own_result_note(own, rank), captured, verdict)
            shown = (
                report
                if shown_text is None
                else self._stop_report(item, shown_text, captured, verdict)
            )
            if self.running.logged:  # its own result is in the JUnit file already
                self.records.log_shown(report=shown)
            else:  # the results file may hold its own result (the exchange was next)
                self.records.log_both(item, [report], shown=[shown], results=own is None)
            self.records.reached(item)
        not_run = self.records.report_not_run(reason)
        self.tally.publish()  # the other ranks' summaries count this rank's share
        self.records.write_now(self.interrupted)
        self._print_summary(reason)
        end_children()
        self.hang_watch.write(f"[rank {rank}] rankgate: {reason}; {not_run}")
        try:
            self.control.set(control.exited_key(rank), True)
            # After a hang the others finish their tests; a signal stops them too.
            finish = verdict == "hung"
            if (
                self.wait_for_peers_to_exit(gone, finish_tests=finish)
                and self.group.store_path is not None
            ):
                # Each rank's last store operation was its "exited" (a dead one's was
                # earlier): nobody reads the FileStore again, and a killed run must not
                # leave it in the temp dir.
                self.group.store_path.unlink(missing_ok=True)
        except Exception:
            pass

    def _stop_report(
        self, item: pytest.Item, text: str, captured: tuple[str, str], verdict: str
    ) -> pytest.TestReport:
        """The failure a stopping rank records for the test it was in."""
        return item_report(
            item,
            outcome="failed",
            longrepr=failure_repr(item, f"{text}\n{self.plan.reproduction_line(item)}"),
            when="call",
            sections=[  # the terminal's share, as the pool's (the files cut it again)
                (f"Captured {name} call", clip_text(out, TERMINAL_LIMIT))
                for name, out in zip(("stdout", "stderr"), captured, strict=True)
                if out
            ],
            user_properties=[("rankgate.verdict", verdict)],
            duration=time.monotonic() - self.running.start if self.running.item is item else 0.0,
        )

    def _print_summary(self, reason: str) -> None:
        """What pytest prints at the end of a session, for a session that ends here."""
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is None:
            return
        # The main thread may be printing the session's summary: this one follows it.
        with self.tally.summary_turn():
            try:
                tr.write_line("")
                self.config.hook.pytest_terminal_summary(
                    terminalreporter=tr, exitstatus=pytest.ExitCode.TESTS_FAILED, config=self.config
                )
                tr.write_sep("!", f"rankgate: {reason}", red=True)
                tr.summary_stats()
                tr._tw.flush()
            except Exception as exc:  # the process exits next: say why the summary is short
                self.hang_watch.write(f"[rank {self.launch.rank}] rankgate: no summary: {exc!r}")

    def _where_hung_ranks_wait(
        self, item: pytest.Item, stacks: str, failed: Sequence[int] = (), ledgers=None
    ) -> dict:
        """Where this rank waits, and where the others that hung in this test say they do
        (the ranks that ``failed`` it are not waited for: they are not in it any more);
        their ledgers go into ``ledgers`` (this rank's is there)."""
        key = f"where/{item.nodeid}/"
        ledger_key = f"ledger/{item.nodeid}/"
        ledgers = {} if ledgers is None else ledgers
        mine = stack_where(stacks, str(item.path))
        self.control.set(ledger_key + str(self.launch.rank), ledgers.get(self.launch.rank))
        self.control.set(key + str(self.launch.rank), mine)
        members = self.plan.ranks_of(item.nodeid)  # a sub-world's ranks only
        others = [key + str(r) for r in members if r != self.launch.rank and r not in failed]
        deadline = time.monotonic() + WHERE_WAIT_S
        while time.monotonic() < deadline and not self.control.store.check(others):
            time.sleep(0.05)
        wheres = {self.launch.rank: mine}
        for r in members:
            if r != self.launch.rank and self.control.store.check([key + str(r)]):
                wheres[r] = self.control.peek(key + str(r))
                ledgers[r] = self.control.peek(ledger_key + str(r))  # set before its where
        return wheres

    def wait_for_peers_to_exit(
        self, gone: Sequence[int] = (), *, finish_tests: bool = True
    ) -> bool:
        """True when every other rank but those ``gone`` said it exited within EXIT_WAIT_S,
        and ``finish_tests``: once the test each is in has ended too (other sub-worlds
        finish theirs, recording its verdict, before a launcher stops them all)."""
        others = [r for r in range(self.launch.world_size) if r not in (self.launch.rank, *gone)]
        keys = [control.exited_key(r) for r in others]
        seconds = EXIT_WAIT_S + (self.plan.longest_timeout if finish_tests else 0.0)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.control.store.check(keys):
                return True
            time.sleep(0.05)
        return False

    def park_if_stopping(self) -> None:
        """A watcher thread records this test and ends the process: wait for that."""
        if self.begun.is_set():
            threading.Event().wait()

    def ended_here(self, ranks: list[int]) -> list[int]:
        """Of ``ranks``, those known to have ended: on this host, their process is gone
        (a rank whose host and pid this one never learned is not presumed dead)."""
        return [r for r in ranks if r < len(self.peers) and not self._may_be_running(r)]

    def for_crashed_peers(self, item: pytest.Item, dead: list[int]) -> NoReturn:
        """Peers died in this test without a result (os._exit, a signal, the OOM killer):
        record it and end now, as when the launcher's signal says so, without waiting for
        that signal (mpirun's SIGKILL follows its SIGTERM within a second)."""
        with self.verdict_lock:
            self.begun.set()
        if not self._claim():
            threading.Event().wait()  # a signal's watcher records this rank and exits it
        self.cut_short = True
        crashes = self.records.crashes(dead, str(item.path))
        cause = f"{_crashed(dead, crashes)} while {item.nodeid} ran"
        self._log_ledger(item)
        stacks = crashrecord.stacks_section(crashes, self.records.crash_path)
        text = cause + self._in_flight_note() + stacks
        self._record(item, cause, text, verdict="crashed", gone=dead)
        os._exit(pytest.ExitCode.TESTS_FAILED)

    def _log_ledger(self, item: pytest.Item) -> None:
        """This rank's ledger of ``item``, which a peer's death ended: merge-junit reads
        the peers' ledgers for the verdict (the dead rank's died with it)."""
        try:
            mine = divergence.renumbered(ledger.now(), self.group.members)
            self.records.log_ledger(item, mine)
        except Exception:
            pass  # a verdict without the ledgers still stands

    def _in_flight_note(self) -> str:
        """'; rank 0 was in all_reduce #1 (float32[4]) issued at x.py:9': the collective
        this rank's test did not complete when a peer died ('' when none)."""
        waiting = divergence.in_flight(ledger.now())
        if waiting is None:
            return ""
        return f"; rank {self.launch.rank} was in {divergence.describe(waiting)}"
