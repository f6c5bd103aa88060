"""A stopping rank's last record: the test it was in, every test not yet run, its JUnit
file and summary; then it ends its children, tells the other ranks and waits for them.

It runs in the thread that claimed the stop (``running.StopGate``): a watcher, while the
main thread is stuck or parked, or the main thread when a peer's process ended during
the exchange; so nothing else touches pytest's state, and the session never finishes.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path

import pytest

from rankgate.harness import leaks, locks
from rankgate.harness.failure_repr import failure_repr, item_report
from rankgate.harness.inplace import control
from rankgate.harness.inplace.peers import Peers
from rankgate.harness.inplace.records import RankRecords
from rankgate.harness.inplace.reruns import no_rerun_note
from rankgate.harness.inplace.running import RunningTest
from rankgate.harness.inplace.tally import RunTally
from rankgate.harness.inplace.verdict import own_result
from rankgate.harness.output import TERMINAL_LIMIT, clip_text

STORE_TIMEOUT_WHEN_STOPPING = timedelta(seconds=2)
"""The store may be gone with the launcher: a stopping rank never waits long on it."""


def end_children() -> None:
    """End every process this rank started (forkservers, pool workers, helpers):
    the rank exits now, and they would outlive it under PID 1."""
    tree, todo = {}, [os.getpid()]
    while todo:
        found = list(leaks.children(todo.pop()))
        # Each with its start time: a grandchild reaped by its own parent meanwhile leaves
        # its pid free, and only the process that started then is signalled.
        tree |= {pid: start for pid in found if (start := leaks.started(pid)) is not None}
        todo += found
    for sig, wait in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 0.0)):
        for pid, start in tree.items():
            if leaks.started(pid) != start:
                continue
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(leaks.started(p) == s for p, s in tree.items()):
            leaks.reap(tree)
            time.sleep(0.05)
        leaks.reap(tree)


def _own_result_note(own: list[pytest.TestReport] | None, rank: int) -> str:
    """What this rank's test had come to before the stop, for its JUnit ('' if unknown):
    its own failure (say gloo's 'Connection closed by peer' as the peer died) stays."""
    if own is None:
        return ""
    result = own_result(own)
    if result.outcome in ("failed", "error"):
        return f"\n\nrank {rank}'s own result before that: {result.outcome}\n" + result.text
    return f"\n\nrank {rank}'s own result before that: {result.outcome}"


class LastRecord:
    """What a stopping rank writes before it exits (see the module doc)."""

    def __init__(
        self,
        config: pytest.Config,
        channel: control.ControlChannel,
        *,
        records: RankRecords,
        running: RunningTest,
        tally: RunTally,
        peers: Peers,
        say: Callable[[str], None],
        reproduce: Callable[[pytest.Item], str],
        finish_s: Callable[[], float],
        store_path: Path | None,
        reruns: int,
    ) -> None:
        """``say``: a line to the rank's real stderr; ``reproduce``: a test's
        reproduction line; ``finish_s()``: how long another sub-world's test may still
        run; ``store_path``: the FileStore, removed once every rank is done with it;
        ``reruns``: the run's (a stuck test's record says it cannot be rerun)."""
        self.config, self.control = config, channel
        self.records, self.running, self.tally, self.peers = records, running, tally, peers
        self.say, self.reproduce, self.finish_s = say, reproduce, finish_s
        self.store_path = store_path
        self.reruns = reruns
        self.interrupted: tuple[str, pytest.Item | None] | None = None
        """Why a signal cut the run short (no rank had failed), and the test it stopped."""

    def write(
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
        ``gone``, whose processes are known to have ended)."""
        rank = self.control.rank
        stuck = item is not None and verdict in ("hung", "crashed")  # not a CI's signal
        added = [no_rerun_note(self.reruns).strip(" ()")] if stuck and self.reruns else []
        if added:
            reason += no_rerun_note(self.reruns)
        # This rank exits next: a lock file that only its existence makes a lock (torch's
        # FileBaton) would hold every later run that takes it.
        held = locks.release(locks.survey([os.getpid(), *leaks.children()]), [])
        if held:
            added.append(held)
            self.say(f"[rank {rank}] rankgate: {held}")
        text = "\n".join([text, *added])
        shown_text = None if shown_text is None else "\n".join([shown_text, *added])
        captured = self._take_terminal()
        reason = self._agree(reason, verdict)
        if item is not None:
            self._record_test(item, text, shown_text, captured, verdict)
        not_run = self.records.report_not_run(reason)
        self.tally.publish()  # the other ranks' summaries count this rank's share
        self.records.write_now(self.interrupted)
        self._print_summary(reason)
        end_children()
        self.say(f"[rank {rank}] rankgate: {reason}; {not_run}")
        self._leave(gone, finish_tests=verdict == "hung")

    def _take_terminal(self) -> tuple[str, str]:
        """The test's output so far, and the terminal back from pytest's capture."""
        capman = self.config.pluginmanager.get_plugin("capturemanager")
        if capman is None:
            return ("", "")
        try:
            capman.suspend_global_capture(in_=True)
            return capman.read_global_capture()
        except Exception:
            return ("", "")

    def _agree(self, reason: str, verdict: str) -> str:
        """Stop the run in the store; the run's reason: after a hang, the first stopping
        rank's, if its test hung first (a signal reaches every rank: each names its own)."""
        try:
            self.control.store.set_timeout(STORE_TIMEOUT_WHEN_STOPPING)
            agreed = self.control.abort(reason)
            return agreed if verdict == "hung" else reason
        except Exception:
            return reason  # the store is gone; the others learn it from the launcher

    def _record_test(
        self,
        item: pytest.Item,
        text: str,
        shown_text: str | None,
        captured: tuple[str, str],
        verdict: str,
    ) -> None:
        """The stopped test, failed: its JUnit (with this rank's own result before the
        stop), its results file unless its own result is there, the terminal."""
        own = self.running.own if item is self.running.item else None
        note = _own_result_note(own, self.control.rank)
        report, shown = self._stop_reports(item, (text + note, shown_text), captured, verdict)
        if self.running.logged:  # its own result is in the JUnit file already
            self.records.log_shown(report=shown)
        else:  # the results file may hold its own result (the exchange was next)
            self.records.log_both(item, [report], shown=[shown], results=own is None)
        self.records.reached(item)

    def _stop_reports(
        self,
        item: pytest.Item,
        texts: tuple[str, str | None],
        captured: tuple[str, str],
        verdict: str,
    ) -> list[pytest.TestReport]:
        """The failure a stopping rank records for the test it was in, once for each of
        ``texts``: its files' and its terminal's (None: the terminal's is the files')."""
        sections = [  # the terminal's share, as the pool's (the files cut it again)
            (f"Captured {name} call", clip_text(out, TERMINAL_LIMIT))
            for name, out in zip(("stdout", "stderr"), captured, strict=True)
            if out
        ]
        ran = time.monotonic() - self.running.start if self.running.item is item else 0.0
        reproduce = self.reproduce(item)
        reports: list[pytest.TestReport] = []
        for text in texts:
            reports.append(
                reports[-1]
                if text is None
                else item_report(
                    item,
                    outcome="failed",
                    longrepr=failure_repr(item, f"{text}\n{reproduce}"),
                    when="call",
                    sections=list(sections),
                    user_properties=[("rankgate.verdict", verdict)],
                    duration=ran,
                )
            )
        return reports

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
                self.say(f"[rank {self.control.rank}] rankgate: no summary: {exc!r}")

    def _leave(self, gone: Sequence[int], *, finish_tests: bool) -> None:
        """Say this rank exited, wait for the others (after a hang, until they finished
        their tests too; a signal stops them as well), and remove the FileStore when
        every rank is done with it."""
        try:
            self.control.set(control.exited_key(self.control.rank), True)
            finish_s = self.finish_s() if finish_tests else 0.0
            if self.peers.wait_for_exit(gone, finish_s) and self.store_path is not None:
                # Each rank's last store operation was its "exited" (a dead one's was
                # earlier): nobody reads the FileStore again, and a killed run must not
                # leave it in the temp dir.
                self.store_path.unlink(missing_ok=True)
        except Exception:
            pass
