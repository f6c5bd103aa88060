"""In-place mode's reruns of a failed world test (``--rankgate-reruns``).

Every rank of the job is a pytest process, so a rerun runs on the same processes: what
is made fresh is the process group (every rank leaves it and joins a new one) and the
test's function-scoped fixtures (each attempt is a whole set-up, call and teardown;
``tmp_path`` and ``dist_tmp_path`` stay the one directory of the test). The ranks rerun
together or not at all: after an attempt's outcomes are exchanged, each rank says
through the store whether it can go again, and only a yes from every rank reruns. A
hang or a dead rank cannot be rerun in place: a stuck rank can only exit, and so the
run stops as without reruns (:func:`no_rerun_note` says so in its record).
"""

from __future__ import annotations

import copy

import pytest

from rankgate.harness import divergence, verdict_lines
from rankgate.harness.attempts import (
    ATTEMPTS_PROPERTY,
    FLAKY_PROPERTY,
    Attempt,
    attempts_text,
    encode,
    flaky_summary,
    is_flaky,
)
from rankgate.harness.failure_repr import failure_repr
from rankgate.harness.inplace.verdict import BAD, Results, by_rank, parted, report_text, words
from rankgate.harness.verdict_table import combine


def attempt_words(everyone: Results, *, marked: bool) -> dict[int, str]:
    """Each rank's outcome of one attempt, as a pool's rank reports it. Under an xfail
    marker a rank's body failed or passed (the marker makes the last attempt's failure an
    expected one, as a pool's controller does); without one a rank's own
    ``pytest.xfail()`` is "xfailed", which beside a pass is a disagreement, never a
    failure to rerun."""
    if not marked:
        return words(everyone)
    as_body = {"xfailed": "failed", "xpassed": "passed"}
    return {r: as_body.get(res.xfail, res.outcome) for r, res in everyone.items()}


def attempt_of(number: int, everyone, world: int, backend: str, *, marked: bool = False) -> Attempt:
    """One attempt from every rank's result; its verdict is the one table's
    (``verdict_table.combine``) for the ranks' ``attempt_words`` and ledgers, as a pool
    attempt's is. ``marked``: the test runs under an xfail marker."""
    everyone = by_rank(everyone)  # by global rank: a sub-world's ranks are named as such
    outcomes = divergence.worded(attempt_words(everyone, marked=marked), parted(everyone))
    table = combine(outcomes)
    verdict = "disagreement" if table.disagree else table.verdict
    failed = {r: everyone[r].seconds for r, o in outcomes.items() if o == "failed"}
    bad = [r for r, res in everyone.items() if res.outcome in BAD]
    line = verdict_lines.outcomes_line(outcomes, first=verdict_lines.first_failed(failed))
    where = f"(world {world}, backend {backend})"
    if table.disagree:  # as a pool attempt's summary says it
        summary = f"ranks disagree {where}: {line}"
    else:
        summary = f"{line} {where}" if bad or verdict == "failed" else ""
    return Attempt(
        number=number,
        verdict=verdict,
        summary=summary,
        ranks=outcomes,
        errors={r: everyone[r].text for r in bad},
    )


def no_rerun_note(reruns: int) -> str:
    """What a stop's record adds when reruns were asked for (they cannot happen)."""
    if not reruns:
        return ""
    return (
        " (not rerun: in place a hung or dead rank can only exit, so its peers cannot run "
        "the test again; a pool run, without a launcher, reruns hangs and crashes)"
    )


def properties(attempts: list[Attempt], policy: str) -> list[tuple[str, str]]:
    """The JUnit properties of a test run more than once."""
    if len(attempts) < 2:
        return []
    props = [(ATTEMPTS_PROPERTY, encode(attempts))]
    if is_flaky(attempts):
        props.append((FLAKY_PROPERTY, policy))
    return props


def with_attempts(
    item: pytest.Item, reports: list[pytest.TestReport], attempts: list[Attempt], policy: str
) -> list[pytest.TestReport]:
    """The last attempt's reports, telling of every attempt: the properties on its call
    report; a flaky test failed under ``--rankgate-flaky=fail``; the earlier attempts'
    texts (the first failure's whole text first) on a failure, or beside a flaky pass."""
    props = properties(attempts, policy)
    if not props:
        return reports
    reports = [copy.copy(r) for r in reports]
    call = next((r for r in reports if r.when == "call"), None)
    if call is None:
        return reports
    call.user_properties = [*call.user_properties, *props]
    call.sections = list(call.sections)
    every = attempts_text(attempts)
    if is_flaky(attempts) and policy == "fail":
        call.outcome = "failed"
        call.longrepr = failure_repr(item, f"{flaky_summary(attempts, 'fail')}\n{every}")
    elif is_flaky(attempts):
        call.sections.append((f"rankgate: {flaky_summary(attempts, policy)}", every))
    if not is_flaky(attempts):
        return with_every_attempt(item, reports, attempts)
    return reports


def with_every_attempt(
    item: pytest.Item, reports: list[pytest.TestReport], attempts: list[Attempt]
) -> list[pytest.TestReport]:
    """Failed reports with every attempt's texts, the first failure's whole text first."""
    if len(attempts) < 2:
        return reports
    every = attempts_text(attempts)
    reports = list(reports)
    for i, report in enumerate(reports):
        if not report.failed:
            continue
        report = reports[i] = copy.copy(report)
        report.longrepr = copy.deepcopy(report.longrepr)  # the caller's stays its own
        if hasattr(report.longrepr, "addsection"):
            report.longrepr.addsection("rankgate: every attempt", every)
        else:
            report.longrepr = failure_repr(item, f"{report_text(report)}\n\n{every}")
    return reports
