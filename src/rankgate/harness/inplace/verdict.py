"""In-place mode's cross-rank verdict of one test, as every rank's terminal shows it.

Each rank runs the test's phases without logging them, sends what it saw (its worst
outcome, its failure text, its captured output) to the others, and then logs:

- its own reports to its JUnit file and its results file (a rank's files say what
  happened on that rank; merge-junit makes the verdict from them), and
- the verdict reports to everything else (terminal, session's -x/--maxfail count,
  last-failed cache): its own reports, with a failure on any other rank turned into a
  failure here that carries that rank's text and output. Every rank then shows and
  counts the same verdict for the test, once.
"""

from __future__ import annotations

import copy
from typing import NamedTuple

import pytest
from _pytest._code.code import ReprFileLocation
from _pytest.skipping import xfailed_key

from rankgate.harness import divergence, leaks, ledger, verdict_lines
from rankgate.harness.failure_repr import failure_repr
from rankgate.harness.output import strip_ansi
from rankgate.harness.verdict import DISAGREEMENT
from rankgate.harness.verdict_table import Combined, combine

WORST_FIRST = ("error", "failed", "skipped", "passed")
BAD = ("error", "failed")


class RankResult(NamedTuple):
    """What one rank saw of one test (sent to every other rank through the store)."""

    outcome: str
    """error (setup or teardown failed), failed, skipped or passed."""
    text: str
    """The failure's report text (no escape codes); the skip reason when skipped."""
    output: tuple[tuple[str, str], ...]
    """Captured sections (title, text) of the phases that failed."""
    group_trouble: bool = False
    """The test lost or broke this rank's process group."""
    seconds: float = 0.0
    """How long its phases took here (the rank that failed first is named first)."""
    xfail: str = ""
    """Under an xfail marker: "xfailed" (it failed here) or "xpassed" (it passed here,
    strict or not); "" otherwise."""
    ledger: list[dict] | None = None
    """The collectives the test issued here (``ledger.snapshot``); None: no ledger."""
    digest: dict | None = None
    """Its digest (``ledger.digest``): the ledgers are compared only where digests differ."""


def outcome_of(report: pytest.TestReport) -> str:
    if report.failed:
        return "failed" if report.when == "call" else "error"
    return "skipped" if report.skipped else "passed"


def report_text(report: pytest.TestReport) -> str:
    if report.longrepr is None:
        return ""
    if isinstance(report.longrepr, tuple):  # a skip: (path, line, reason)
        return str(report.longrepr[2])
    return strip_ansi(str(report.longrepr))


def xfail_outcome(report: pytest.TestReport, text: str | None = None) -> str:
    """ "xfailed" or "xpassed" for a call that ran under an xfail marker, else "".
    ``text``: the report's ``report_text``, where the caller has it already."""
    if report.when != "call":
        return ""
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    if not report.failed:
        return ""
    text = report_text(report) if text is None else text
    return "xpassed" if verdict_lines.is_strict_xpass(text) else ""


def own_result(reports: list[pytest.TestReport], *, all_output: bool = False) -> RankResult:
    """This rank's result of one test from its phase reports; ``all_output``: the
    captured output of phases that passed too (``-rA``/``-rP`` shows it)."""
    outcome, texts, output, xfail = "passed", [], [], ""
    for report in reports:
        this, text = outcome_of(report), report_text(report)  # each report read once
        if WORST_FIRST.index(this) < WORST_FIRST.index(outcome):
            outcome = this
        if this in BAD or (this == "skipped" and outcome == "skipped"):
            texts.append(text)
        if this in BAD or all_output:
            output.extend((title, strip_ansi(section)) for title, section in report.sections)
        xfail = xfail or xfail_outcome(report, text)
    return RankResult(
        outcome,
        "\n".join(t for t in texts if t),
        tuple(dict.fromkeys(output)),
        seconds=sum(report.duration for report in reports),
        xfail=xfail,
    )


def junit_outcome(res: RankResult) -> str:
    """A rank's outcome as its JUnit and results files say it: "xpassed" for a pass
    under a non-strict xfail marker, "xfailed" for an expected failure (no plain skip)."""
    if xpassed(res):
        return "xpassed"
    return "xfailed" if res.xfail == "xfailed" else res.outcome


def failure_message(reports: list[pytest.TestReport]) -> str:
    """The first line of the first failed or skipped phase's report, as JUnit's
    ``message`` says it ('' when every phase passed)."""
    failed = [r for r in reports if r.failed or r.skipped]
    if not failed:
        return ""
    crash = getattr(failed[0].longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message
    return report_text(failed[0]).split("\n", 1)[0]


Results = dict[int, RankResult]
"""Each rank's result of one test, by global rank (a sub-world's ranks only)."""


def by_rank(everyone: Results | list[RankResult]) -> Results:
    """A list of every rank's results (rank r at r) as ``Results``; ``Results`` as it is."""
    return everyone if isinstance(everyone, dict) else dict(enumerate(everyone))


def word(res: RankResult) -> str:
    """A rank's outcome in the words of the one table (``verdict_table``): an expected
    failure (a marker's or ``pytest.xfail()``'s) is "xfailed", a pass under an xfail
    marker "xpassed" (a strict one too), never a plain skip or pass."""
    return res.xfail or res.outcome


def xpassed(res: RankResult) -> bool:
    """Whether the rank passed the test under a non-strict xfail marker (a strict one's
    pass is a failure its report already says)."""
    return res.xfail == "xpassed" and res.outcome == "passed"


def words(everyone: Results) -> dict[int, str]:
    """Every rank's ``word``, by rank."""
    return {r: word(res) for r, res in everyone.items()}


def combined(everyone: Results, diverged: divergence.Divergence | None = None) -> Combined:
    """The test's verdict over its ranks, by the one table the pool and merge-junit use
    (a strict xfail's pass is a failure: that rank reported one)."""
    strict = any(res.xfail == "xpassed" and res.outcome == "failed" for res in everyone.values())
    return combine(divergence.worded(words(everyone), diverged), strict=strict)


def _xfailed_as_one(everyone: Results) -> bool:
    return combined(everyone).as_one


DISAGREE_PREFIX = "ranks disagree: "
"""How a test's problem begins when no rank failed it but their outcomes differ."""


def with_ledger(mine: RankResult, members) -> RankResult:
    """``mine`` with this rank's ledger of the test and its digest; a sub-world's name its
    global ranks (``members``, in order), as its verdict does."""
    return mine._replace(
        ledger=divergence.renumbered(ledger.now(), members),
        digest=divergence.renumbered_digest(ledger.digest(), members),
    )


def ledgers_compared(everyone: Results) -> bool:
    """Whether the ranks' ledgers make part of the test's verdict (a rank went wrong, or
    their digests differ): each rank then keeps its own for merge-junit."""
    return any(res.outcome in BAD for res in everyone.values()) or parted(everyone) is not None


def parted(everyone: Results) -> divergence.Divergence | None:
    """Where the ranks' ledgers part, looked for where a rank went wrong or the ranks'
    digests differ (a test every rank passed but whose ranks issued different calls)."""
    bad = any(res.outcome in BAD for res in everyone.values())
    if not bad and not divergence.digests_differ({r: res.digest for r, res in everyone.items()}):
        return None
    return divergence.find({r: res.ledger for r, res in everyone.items()})


def cross_rank_problem(everyone: Results | list[RankResult], rank: int) -> str | None:
    """What the other ranks add to this rank's verdict, or None when they add nothing."""
    everyone = by_rank(everyone)
    diverged = parted(everyone)
    verdict = combined(everyone, diverged)
    if verdict.as_one:
        return None
    outcomes = divergence.worded(words(everyone), diverged)
    failed = {r: res.seconds for r, res in everyone.items() if res.outcome == "failed"}
    line = verdict_lines.outcomes_line(outcomes, first=verdict_lines.first_failed(failed))
    ledgers = {r: res.ledger for r, res in everyone.items()}
    if diverged is not None:
        line = verdict_lines.with_cause(line, divergence.cause_of(diverged, ledgers))
        if all(res.outcome not in BAD for res in everyone.values()):
            return line + "\n" + divergence.side_by_side(ledgers, diverged)
    if diverged is None and any(res.outcome in BAD for res in everyone.values()):
        # processes a test left running, named as the pool's headline names them
        left = {r: leaks.left_running_in(res.text) for r, res in everyone.items()}
        line = verdict_lines.with_cause(line, verdict_lines.left_running_cause(left))
        bad = {r: res.text for r, res in everyone.items() if res.outcome in BAD}
        line = verdict_lines.with_cause(line, verdict_lines.after_test_cause(bad))
    others_bad = [r for r, res in everyone.items() if res.outcome in BAD and r != rank]
    if others_bad:
        return line + "".join(
            f"\n--- rank {r}: {everyone[r].outcome} ---\n{everyone[r].text}" for r in others_bad
        )
    if verdict.disagree:
        return f"{DISAGREE_PREFIX}{line}"
    return None


class Judged(NamedTuple):
    """What the run makes of every rank's result of one test, in one pass."""

    everyone: Results
    ledgers_compared: bool
    """The ranks' ledgers make part of the verdict (``ledgers_compared``)."""
    problem: str | None
    """What the other ranks add to this rank's verdict (``cross_rank_problem``)."""
    failed: list[int]
    """The ranks that failed or errored it, for the run's last line ([] when every
    rank's expected failure makes one)."""
    group_trouble: bool
    """A rank lost or broke its process group: a new one follows."""


def judged(ranks, gathered, rank: int) -> Judged:
    """Every rank's result of a test (``gathered`` by ``ranks``, in order), judged."""
    everyone = {r: RankResult(*result) for r, result in zip(ranks, gathered, strict=True)}
    bad = [r for r, res in everyone.items() if res.outcome in BAD]
    return Judged(
        everyone,
        ledgers_compared(everyone),
        cross_rank_problem(everyone, rank),
        [] if _xfailed_as_one(everyone) else bad,
        any(res.group_trouble for res in everyone.values()),
    )


def verdict_reports(
    item: pytest.Item,
    own: list[pytest.TestReport],
    everyone: Results | list[RankResult],
    rank: int,
) -> list[pytest.TestReport]:
    """This rank's reports as the cross-rank verdict makes them (see the module doc)."""
    everyone = by_rank(everyone)
    if _xfailed_as_one(everyone):
        return [_as_xfailed(item, report) for report in own]
    problem = cross_rank_problem(everyone, rank)
    others_output = [
        (f"{title} (rank {r})", text)
        for r, res in everyone.items()
        if r != rank
        for title, text in res.output
    ]
    if problem is None:
        return _with_others_output(own, others_output)
    reports = [copy.copy(r) for r in own]
    for report in reports:
        report.sections = list(report.sections)
    failed_here = [r for r in reports if r.failed]
    if failed_here:  # already a failure here, counted once: it gains the others' texts
        target = failed_here[0]
        target.longrepr = copy.deepcopy(target.longrepr)  # the own report keeps its own
        if hasattr(target.longrepr, "addsection"):
            target.longrepr.addsection("rankgate: the other ranks", problem)
        else:
            target.longrepr = failure_repr(item, f"{report_text(target)}\n\n{problem}")
        crash = getattr(target.longrepr, "reprcrash", None)
        # The short summary's line: the verdict, as the pool's says it (a strict xfail
        # that passed keeps pytest's own words there, as in the pool).
        if crash is not None and not verdict_lines.is_strict_xpass(crash.message):
            target.longrepr.reprcrash = ReprFileLocation(
                crash.path, crash.lineno, problem.split("\n", 1)[0]
            )
    else:
        # The call phase carries the verdict; a test skipped at setup has none.
        target = next((r for r in reports if r.when == "call"), reports[0])
        target.outcome = "failed"
        target.longrepr = failure_repr(item, problem)
        # Outcomes that differ with none bad: an error, as in the pool (ledgers that part
        # with none bad: a failure).
        if not any(res.outcome in BAD for res in everyone.values()) and parted(everyone) is None:
            target.user_properties = [*target.user_properties, DISAGREEMENT]
        if hasattr(target, "wasxfail"):
            del target.wasxfail
    target.sections.extend(others_output)
    return reports


def _with_others_output(
    own: list[pytest.TestReport], others_output: list[tuple[str, str]]
) -> list[pytest.TestReport]:
    """A test no rank failed: its call report gains the other ranks' output (sent only
    under -rA/-rP, which show a passed test's output), as the pool's report has it."""
    call = next((r for r in own if r.when == "call"), None)
    if not others_output or call is None:
        return own
    shown = copy.copy(call)
    shown.sections = [*call.sections, *others_output]
    return [shown if r is call else r for r in own]


def _as_xfailed(item: pytest.Item, report: pytest.TestReport) -> pytest.TestReport:
    """A call that passed here under an xfail marker, as the expected failure it is on
    the whole test (another rank failed it)."""
    if xfail_outcome(report) != "xpassed":
        return report
    xfailed = copy.copy(report)
    xfailed.outcome = "skipped"
    # The marker's reason: a strict pass's text carries the reproduction line too.
    marked = item.stash.get(xfailed_key, None)
    xfailed.wasxfail = marked.reason if marked is not None else getattr(report, "wasxfail", "")
    xfailed.longrepr = None
    return xfailed
