"""In place, the run's closing line counts every test of the run, not one rank's share.

Each rank runs its share (``schedule``); pytest's last line ("3 passed in 5 s") counts
what its terminal showed. A test another sub-world ran, and the one that stopped the
run there, would be missing from it: rank 0 said "3 passed" for a run that merge-junit
calls "3 passed, 1 failed". So every rank notes the terminal's status of each report
it shows (``note``), publishes them when its share ends (``publish``), and before its
summary reads the others' (``learn``): the tests it did not run count in its line
(``count_in``), their failures and the tests they did not run are named above it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

import pytest

from rankgate.harness.attempts import Attempt, decode, encode
from rankgate.harness.inplace import control
from rankgate.harness.inplace.schedule import Schedule
from rankgate.harness.rerun_report import attempts_of, rerun_word
from rankgate.harness.verdict import disagreement_status

TALLY_WAIT_STEP_S = 0.05
SUMMARY_WAIT_S = 5.0
"""How long a summary waits for another one to end: a stop's (the signal watch's thread)
for the session's the main thread may be printing, or the other way round."""
TALLY_PLUGIN = "rankgate-inplace-tally"
"""The tally's name as a plugin: it words and notes each report the terminal shows."""


def tally_key(rank: int) -> str:
    return f"tally/{rank}"


class Shown(NamedTuple):
    """One report as a rank's terminal showed it: its status category ("passed",
    "failed", "error", "" for a passed set-up) and, for a failure, its first line; for
    a call run more than once, its word and attempts as the reruns' section lists them."""

    category: str
    line: str
    rerun: str = ""
    """``rerun_report.rerun_word`` of a test run more than once ("" for one run once)."""
    attempts: str = ""
    """Its attempts, encoded (``attempts.encode``)."""


class Counted:
    """A test another rank ran, in the terminal's stats: counted, never listed."""

    count_towards_summary = True


class RunTally:
    """What this rank's terminal showed of each test, and what the others' showed.

    A plugin of its own (``TALLY_PLUGIN``): the status the terminal gives each report and
    the note of it are one job, so a report's path stays here."""

    def __init__(
        self,
        config: pytest.Config,
        rank: int,
        channel: control.ControlChannel,
        *,
        plan: Schedule,
    ) -> None:
        self.config, self.rank, self.control, self.plan = config, rank, channel, plan
        self.mine: dict[str, list[Shown]] = {}
        self.others: dict[str, list[Shown]] = {}
        """The tests this rank did not run: what the first of their ranks showed."""
        self.replaced: set[str] = set()
        """Tests this rank showed with its own result, a peer's stop being the verdict."""
        self._summary_lock = threading.RLock()
        """Held while a summary prints and counts the others' tests into the terminal's
        stats: a stop's summary comes from the signal watch's thread, maybe while the main
        thread prints the session's, and pytest's sections read each entry as a report."""

    def pytest_report_teststatus(self, report: pytest.TestReport):
        """A report whose ranks disagree, in the terminal's words (as the pool's)."""
        return disagreement_status(report)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.plan.in_run(report.nodeid):  # what this rank's terminal counts of the run
            self.note(report)

    def note(self, report: pytest.TestReport) -> None:
        """A report this rank's terminal shows (its share's, the not-run ones too)."""
        status = self.config.hook.pytest_report_teststatus(report=report, config=self.config)
        category = status[0] if status else ""
        line = ""
        if report.failed and report.longrepr is not None:  # as the short summary words it
            crash = getattr(report.longrepr, "reprcrash", None)
            text = crash.message if crash is not None else str(report.longrepr).strip()
            line = text.splitlines()[0] if text else ""
        attempts = attempts_of(report) if report.when == "call" else []
        rerun = (rerun_word(report, attempts), encode(attempts)) if attempts else ("", "")
        self.mine.setdefault(report.nodeid, []).append(Shown(category, line, *rerun))

    def publish(self) -> None:
        """This rank's share has ended (or stopped): the others may count it now."""
        try:
            self.control.set(tally_key(self.rank), dict(self.mine))
        except Exception:
            pass  # the store went with the launcher: the others count without it

    def learn(self, wait_s: float, ended: Callable[[list[int]], list[int]]) -> None:
        """The others' tallies, waiting up to ``wait_s`` for the ranks still running
        (not ``ended``): another sub-world finishes the test it is in after a stop."""
        others = [r for r in range(self.control.world) if r != self.rank]
        deadline = time.monotonic() + wait_s
        try:
            while True:
                missing = [r for r in others if not self.control.store.check([tally_key(r)])]
                missing = [r for r in missing if r not in ended(missing)]
                if not missing or time.monotonic() >= deadline:
                    break
                time.sleep(TALLY_WAIT_STEP_S)
            told = {r: self.control.peek(tally_key(r)) or {} for r in others}
        except Exception:
            return  # the store is gone: this rank's line counts its share
        for nodeid in sorted({n for tally in told.values() for n in tally}, key=self.plan.place):
            ranks = self.plan.ranks_of(nodeid)
            if self.rank not in ranks:
                first = next(r for r in ranks if nodeid in told.get(r, {}))
                self.others[nodeid] = [Shown(*s) for s in told[first][nodeid]]
                continue
            # A test of this rank's share that a peer stopped the run in: this rank's
            # terminal showed its own result (the exchange never came); the stopping
            # rank's verdict is the run's.
            theirs = [told[r][nodeid] for r in ranks if nodeid in told.get(r, {})]
            worse = [t for t in theirs if _failed(t)]
            if worse and not _failed(self.mine.get(nodeid, [])):
                self.others[nodeid] = [Shown(*s) for s in worse[0]]
                self.replaced.add(nodeid)

    def problems(self) -> list[tuple[str, str]]:
        """The others' tests that failed or were not run: (node id, first line)."""
        return [
            (nodeid, s.line)
            for nodeid, shown in self.others.items()
            for s in shown
            if s.category in ("failed", "error") and s.line
        ]

    def reruns(self) -> dict[str, tuple[str, list[Attempt]]]:
        """The others' tests run more than once: node id -> (word, attempts)."""
        return {
            nodeid: (s.rerun, decode(s.attempts))
            for nodeid, shown in self.others.items()
            for s in shown
            if s.rerun
        }

    @contextlib.contextmanager
    def summary_turn(self) -> Iterator[None]:
        """The summary lock, waited for up to SUMMARY_WAIT_S; the block runs either way (a
        summary is better printed beside another than not at all, or never)."""
        locked = self._summary_lock.acquire(timeout=SUMMARY_WAIT_S)
        try:
            yield
        finally:
            if locked:
                self._summary_lock.release()

    def count_out(self, tr) -> None:
        """The others' tests out of the terminal's stats again, before a second summary
        (a signal after the first): pytest's sections read each entry as a report."""
        for reports in tr.stats.values():
            reports[:] = [r for r in reports if not isinstance(r, Counted)]

    def count_in(self, tr) -> None:
        """The others' tests into the terminal's stats, which its last line counts."""
        for reports in tr.stats.values():
            reports[:] = [r for r in reports if getattr(r, "nodeid", None) not in self.replaced]
        for shown in self.others.values():
            for s in shown:
                if s.category:
                    tr.stats.setdefault(s.category, []).append(Counted())
        set_colour = getattr(tr, "_set_main_color", None)
        if set_colour is not None:  # the line's colour and the categories it names
            set_colour()


def _failed(shown) -> bool:
    return any(Shown(*s).category in ("failed", "error") for s in shown)
