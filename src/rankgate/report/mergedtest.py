"""One test's merged verdict over its ranks' JUnit cases (``rankgate merge-junit``).

Each rank's case is put in the one table's words (:mod:`rankgate.harness.verdict_table`:
a failure that is an in-place hang's record is "hung", a rank's death inside the test
"crashed", a pass the rank recorded as one under an xfail marker "xpassed", a rank the
ledgers single out "diverged") and the table makes the verdict, as it does in the pool
and on every in-place rank. :func:`merge_test` returns it as a :class:`MergedTest`, its
message naming what each rank did in rankgate's one wording.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rankgate.harness import crashrecord, divergence, verdict_lines
from rankgate.harness.attempts import ATTEMPTS_PROPERTY, FLAKY_PROPERTY, Attempt, decode
from rankgate.harness.verdict_lines import INTERRUPTED_PREFIX, OUTCOME_PROPERTY
from rankgate.harness.verdict_table import FAILING, combine
from rankgate.report.junitfile import CaseResult, join_texts, not_run_reason
from rankgate.report.rankresults import crashed_in

_FAILING_RANK = FAILING | {"error", "not run", "missing"}
"""A rank's outcomes that make it one of a test's failing ranks."""


@dataclass(frozen=True, slots=True)
class MergedTest:
    """One test id's verdict over all ranks."""

    classname: str
    name: str
    verdict: str
    message: str
    """What each rank did, when the verdict is not passed (the reason, when skipped)."""
    details: str
    """The failing, erroring or disagreeing ranks' own texts, each headed by its rank."""
    results: dict[int, CaseResult]
    missing: tuple[int, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    """Where it ran when runs were merged (``shard``, ``node``, ``job``), written as properties."""
    diverged: tuple[int, ...] = ()
    """Ranks that passed but that the ledgers single out: worded "diverged", failing."""

    @property
    def attempts(self) -> list[Attempt]:
        """Every attempt of a test run more than once (``--rankgate-reruns``), as the
        ranks recorded it ([] for a test run once)."""
        return attempts_recorded(self.results.values())

    @property
    def flaky(self) -> str:
        """``pass`` or ``fail`` (the policy it ran under) for a test that failed and then
        passed a rerun; "" otherwise."""
        return next((p for res in self.results.values() if (p := flaky_of(res))), "")

    @property
    def test_id(self) -> str:
        return f"{self.classname}::{self.name}" if self.classname else self.name

    @property
    def node_id(self) -> str:
        """pytest's node id where a rank recorded it (in place), else ``test_id``: the
        name to paste back into pytest."""
        recorded = (res.node_id for _, res in sorted(self.results.items()))
        return next((n for n in recorded if n), self.test_id)

    @property
    def failing_ranks(self) -> tuple[int, ...]:
        """Ranks that failed, errored, or lack the test."""
        bad = [r for r, word in self.rank_outcomes.items() if word in _FAILING_RANK]
        return tuple(sorted(bad))

    @property
    def rank_outcomes(self) -> dict[int, str]:
        """Each expected rank's outcome, as the message words it (a death inside the test
        is ``crashed``, an in-place hang ``hung``); ``missing`` for a rank without it."""
        outcomes = {r: worded_outcome(res.outcome, res) for r, res in self.results.items()}
        outcomes.update(dict.fromkeys(self.missing, "missing"))
        outcomes.update(dict.fromkeys(self.diverged, "diverged"))
        return dict(sorted(outcomes.items()))


def flaky_of(case: CaseResult) -> str:
    """The flaky policy a case recorded ("" for none)."""
    return dict(case.properties).get(FLAKY_PROPERTY, "")


def attempts_recorded(cases: Iterable[CaseResult]) -> list[Attempt]:
    """The attempts the first case that recorded them holds (every rank records the same)."""
    for case in cases:
        said = dict(case.properties).get(ATTEMPTS_PROPERTY)
        if said:
            return decode(said)
    return []


def worded_outcome(outcome: str, result: CaseResult | None) -> str:
    """A failure that is an in-place hang's record, a signal's stop of the run, or a
    rank's death inside the test (its results file stops there), is worded as what it
    was; a pass the rank recorded as one under an xfail marker is ``xpassed``."""
    if result is not None and outcome == "passed":
        return dict(result.properties).get(OUTCOME_PROPERTY, outcome)
    if outcome != "failed" or result is None:
        return outcome
    if verdict_lines.hung_headline(result.message):
        return "hung"
    if result.message.startswith(INTERRUPTED_PREFIX):
        return "interrupted"
    if crashed_in(result.message):
        return "crashed"
    own = verdict_lines.own_result_before_peers_crashed(result.message, result.text, result.rank)
    return own or outcome  # a rank whose peers died: its own outcome, as the pool says


def _table_word(outcome: str, result: CaseResult | None) -> str:
    """``worded_outcome``, and a strict xfail's pass ("[XPASS(strict)]") as ``xpassed``:
    the table makes it a failure where every rank passed, an expected failure beside a
    rank that failed it."""
    if result is not None and outcome == "failed" and verdict_lines.is_strict_xpass(result.message):
        return "xpassed"
    return worded_outcome(outcome, result)


def merge_test(
    classname: str,
    name: str,
    by_rank: dict[int, CaseResult],
    expected: Sequence[int],
    ledgers: dict[int, list | None] | None = None,
) -> MergedTest:
    """The verdict of one test from its ranks' cases (``expected``: the ranks that
    should have one), by the one table."""
    results = dict(sorted(by_rank.items()))
    missing = tuple(r for r in expected if r not in results)
    worded = {r: _table_word(res.outcome, res) for r, res in results.items()}
    worded.update(dict.fromkeys(missing, "missing"))
    hung = [res for r, res in results.items() if worded[r] == "hung"]
    cause = next((c for res in hung if (c := verdict_lines.cause_in(res.message))), "")
    diverged = divergence.find(ledgers or {})
    if diverged is not None and not cause:  # what a hung rank said stands: rank 0 showed it
        cause = divergence.cause_of(diverged, ledgers)
    if not cause:  # 'rank 1 crashed at x.py:12; rank 0 was in all_reduce ...', as the pool
        cause = crashrecord.cause(crashrecord.places_in(results), ledgers or {})
    # A rank the ledgers (or the hung rank's cause) single out never "passed".
    worded = divergence.worded(worded, diverged)
    blamed = divergence.blamed_in(cause)
    worded = {r: "diverged" if r in blamed and w == "passed" else w for r, w in worded.items()}
    strict = any(_table_word(res.outcome, res) != worded_outcome(res.outcome, res)
                 for res in results.values())  # fmt: skip
    combined = combine(worded, strict=strict)
    if combined.as_one:
        return _expected_failure(classname, name, worded, results)
    verdict = combined.verdict
    message = _message(verdict, worded, results, cause, disagree=combined.disagree)
    bad = {r: res for r, res in results.items() if res.outcome in ("failed", "error", "not run")}
    shown = results if combined.disagree else bad  # a disagreement shows what every rank did
    details = "\n\n".join(
        f"----- rank {r}: {res.outcome}"  # one line: mergedcase reads each rank's text back
        + (f": {res.message.splitlines()[0]}" if res.message.strip() else "")
        + (f"\n{res.text.rstrip()}" if res.text.strip() else "")
        for r, res in shown.items()
    )
    if missing:
        what = f"----- {verdict_lines.ranks(missing)}: no result for this test"
        details = join_texts(details, what)
    if diverged is not None:  # the ledgers side by side around where they part
        details = join_texts(divergence.side_by_side(ledgers or {}, diverged), details)
    diverged_ranks = tuple(r for r, w in worded.items() if w == "diverged")
    return MergedTest(
        classname, name, verdict, message, details, results, missing, diverged=diverged_ranks
    )


def _message(
    verdict: str,
    worded: dict[int, str],
    results: dict[int, CaseResult],
    cause: str,
    *,
    disagree: bool,
) -> str:
    """What the merged case says: who did what (and why, where known), or the reason."""
    failed = {r: res.time for r, res in results.items() if worded[r] == "failed"}
    line = verdict_lines.outcomes_line(worded, first=verdict_lines.first_failed(failed))
    if verdict in ("failed", "error"):
        left = {r: f"{res.message}\n{res.text}" for r, res in results.items()}
        what = verdict_lines.with_cause(line, cause)
        what = verdict_lines.with_cause(what, verdict_lines.after_test_cause(left))
        return f"ranks disagree: {what}" if disagree else what
    if verdict == "not run":  # a rank without it died before the run was stopped
        why = next((r for res in results.values() if (r := not_run_reason(res.message))), "")
        notes = {"not run": why} if why else None
        return verdict_lines.outcomes_line(
            worded, first=verdict_lines.first_failed(failed), notes=notes
        )
    if verdict in ("skipped", "xfailed"):
        reasons = list(dict.fromkeys(res.message for res in results.values()))
        if len(reasons) == 1:
            return reasons[0]
        return "; ".join(f"rank {r}: {res.message}" for r, res in results.items())
    return ""


def _expected_failure(
    classname: str, name: str, outcomes: dict[int, str], results: dict[int, CaseResult]
) -> MergedTest:
    """An xfail-marked test that failed on some ranks and passed on the others: xfailed."""
    reason = next(res.message for r, res in results.items() if outcomes[r] == "xfailed")
    message = f"{reason} ({verdict_lines.outcomes_line(outcomes)})"
    details = "\n\n".join(
        f"----- rank {r}: {outcomes[r]}" + (f"\n{res.text.rstrip()}" if res.text.strip() else "")
        for r, res in results.items()
        if outcomes[r] == "xfailed"
    )
    return MergedTest(classname, name, "xfailed", message, details, results, ())


def missing_ranks_test(absent: Sequence[int], world: int) -> MergedTest:
    """The errored test that stands for ranks that wrote no file at all."""
    message = f"no JUnit file for {verdict_lines.ranks(absent)} of world {world}"
    details = (
        f"{message}: those ranks wrote no results (crashed, killed, or never started); "
        "look for their logs"
    )
    return MergedTest("rankgate.merge", "missing_ranks", "error", message, details, {}, ())
