"""One verdict from every rank's outcome: a test passes only if every rank passed."""

from __future__ import annotations

from dataclasses import dataclass

from rankgate.errors import RankgateError
from rankgate.harness import divergence, leaks, ledger_waits, verdict_lines
from rankgate.harness.outcome import BAD, OutcomeKind, RankOutcome
from rankgate.harness.stacks import where as stack_where
from rankgate.harness.verdict_table import combine

KEPT_OPTIONS = ("-p", "-o", "-c", "--override-ini", "--config-file", "--rootdir")
"""Options of the run that the reproduction line repeats (they change what runs: an
adoption line, a plugin turned off)."""

DISAGREEMENT = ("rankgate.verdict", "disagreement")
"""The user property of a test whose ranks ended differently (a skip on some)."""


def disagreement_status(report) -> tuple[str, str, str] | None:
    """pytest's status for a test whose ranks disagree: an error (no rank failed it),
    the same in the pool and in place."""
    if report.when == "call" and DISAGREEMENT in report.user_properties:
        return "error", "E", "ERROR"
    return None


class StrayOutcome(RankgateError, RuntimeError):
    """An outcome of another test than the one being judged (a harness bug)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    test_id: str
    """The node id of the test judged; every rank's outcome was for this test."""
    status: str
    """passed, failed, skipped, xfailed, or disagreement (ranks ended differently)."""
    summary: str
    """One line: what happened and on which ranks."""
    failing_ranks: tuple[int, ...]
    text: str
    """The full report: each failing rank's traceback, stack or exit."""


def judge(outcomes: list[RankOutcome], world: int, backend: str, *, test_id: str) -> Verdict:
    """One verdict for ``test_id``; raises StrayOutcome for an outcome of another test."""
    strays = [o for o in outcomes if o.test_id != test_id]
    if strays:
        raise StrayOutcome(
            f"judging {test_id!r}, got rank {strays[0].rank}'s outcome of {strays[0].test_id!r}"
        )
    where = f"(world {world}, backend {backend})"
    bad = _root_cause_first(outcomes)
    # Ranks that all passed but whose ledgers part (their digests differed) fail too, and
    # a rank the ledgers single out is a failing rank even where its body returned.
    ledgers = {o.rank: o.ledger for o in outcomes}
    diverged = divergence.find(ledgers)
    named = divergence.worded({o.rank: str(o.outcome) for o in outcomes}, diverged)
    # The ledgers side by side around where they part, shown with the failure.
    table = "" if diverged is None else "\n" + divergence.side_by_side(ledgers, diverged)
    combined = combine(named)  # the one table every wing uses (verdict_table)
    if combined.verdict == "failed":
        summary = f"{headline(outcomes, test_id)} {where}"
        failing = {o.rank for o in bad} | {r for r, w in named.items() if w == "diverged"}
        return Verdict(
            test_id=test_id,
            status="failed",
            summary=summary,
            failing_ranks=tuple(sorted(failing)),
            text=summary + "\n" + table + "".join(_section(o) for o in bad),
        )
    if combined.disagree:
        details = "".join(_section(o) for o in outcomes if o.detail)
        by_kind = verdict_lines.outcomes_line({o.rank: str(o.outcome) for o in outcomes})
        summary = f"ranks disagree {where}: {by_kind}"
        return Verdict(
            test_id=test_id,
            status="disagreement",
            summary=summary,
            failing_ranks=(),
            text=summary + "\n" + details,
        )
    kind = combined.verdict
    reason = outcomes[0].detail if kind in ("skipped", "xfailed") else ""
    return Verdict(test_id=test_id, status=kind, summary=reason, failing_ranks=(), text=reason)


def headline(outcomes: list[RankOutcome], test_id: str) -> str:
    """'rank 1 crashed (killed by SIGSEGV (exit code -11)); rank 0 failed', root cause first.

    Several failed ranks name the one that failed first. The likely cause is the first
    collective where the ranks' ledgers diverge, when they do; else, for hung ranks,
    what their stacks say (the ranks outside every collective).
    """
    failed = {o.rank: o.duration for o in outcomes if o.outcome == OutcomeKind.FAILED}
    crashed = [o.detail for o in outcomes if o.outcome == OutcomeKind.CRASHED and o.detail]
    test_file = test_id.split("::", 1)[0]
    hung = {o.rank: stack_where(o.stack, test_file) for o in outcomes if o.outcome == "hung"}
    ledgers = {o.rank: o.ledger for o in outcomes}
    hung = ledger_waits.waits_per_ledger(hung, ledgers)  # a .wait() the stack cannot see
    diverged = divergence.find(
        ledgers, now={r: str(w) for r, w in hung.items() if w and w.collective is None}
    )
    line = verdict_lines.outcomes_line(
        divergence.worded({o.rank: str(o.outcome) for o in outcomes}, diverged),
        first=verdict_lines.first_failed(failed),
        notes={"crashed": "; ".join(crashed)},
    )
    if diverged is not None:
        return verdict_lines.with_cause(line, divergence.cause_of(diverged, ledgers))
    crashed = {
        o.rank: _crash_place(o.stderr, test_file)
        for o in outcomes
        if o.outcome == OutcomeKind.CRASHED and o.ledger is None
    }
    under = ledger_waits.under_crash(crashed, ledgers)
    if under:
        return verdict_lines.with_cause(line, verdict_lines.ledger_cause(under))
    cause = verdict_lines.hang_cause(hung) or verdict_lines.left_running_cause(
        {o.rank: leaks.left_running_in(o.detail) for o in outcomes if o.outcome in BAD}
    )
    left = verdict_lines.after_test_cause({o.rank: o.detail for o in outcomes if o.outcome in BAD})
    return verdict_lines.with_cause(verdict_lines.with_cause(line, cause), left)


def _crash_place(stderr: str, test_file: str) -> str:
    """'in all_reduce at x.py:29' from a crashed rank's fatal-error stack ('' if none)."""
    place = stack_where(stderr or "", test_file)
    if place is None or place.frame is None:
        return ""
    what = f"in {place.collective} " if place.collective else ""
    return f"{what}at {place.frame.place}"


def _root_cause_first(outcomes: list[RankOutcome]) -> list[RankOutcome]:
    """Crashes, then failures, then hangs: a failing or hung peer is usually a consequence."""
    bad = (o for o in outcomes if o.outcome in BAD)
    return sorted(bad, key=lambda o: (BAD.index(o.outcome), o.rank))


def _section(o: RankOutcome) -> str:
    title = f" rank {o.rank}: {o.outcome} "
    body = o.detail.rstrip()
    if o.stack:
        body += "\nPython stacks of every thread (faulthandler):\n" + o.stack.rstrip()
    return f"\n{title:-^72}\n{body}\n"


def reproduction_line(
    nodeid: str,
    world: int,
    backend: str,
    seed: int | None,
    base_seed: int,
    command: str = "pytest",
    timeout: float | None = None,
) -> str:
    """``command``: how pytest is started (in-place mode puts the launcher in front).

    ``seed`` is None for a test the harness did not seed. ``timeout``: the run's
    ``--rankgate-timeout``, kept so a reproduction of a hang ends as soon as the run did.
    """
    seed_note = "" if seed is None else f" seed={seed}"
    timeout_option = "" if timeout is None else f" --rankgate-timeout={timeout:g}"
    return (
        f"reproduce: {command} '{nodeid}' --rankgate-seed={base_seed}{timeout_option}"
        f"  # world={world} backend={backend}{seed_note}"
    )


def run_options(args: list[str]) -> list[str]:
    """The KEPT_OPTIONS (with their values) among pytest's command-line ``args``."""
    kept, take_next = [], False
    for arg in args:
        if take_next:
            kept.append(arg)
            take_next = False
        elif arg in KEPT_OPTIONS:
            kept.append(arg)
            take_next = True
        elif arg.startswith(tuple(o + "=" for o in KEPT_OPTIONS if o.startswith("--"))) or (
            len(arg) > 2 and arg[:2] in ("-p", "-o", "-c")
        ):
            kept.append(arg)
    return kept
