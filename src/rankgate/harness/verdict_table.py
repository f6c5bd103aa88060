"""The one table that makes a test's verdict from its ranks' outcomes.

The pool (:func:`rankgate.harness.verdict.judge`), in place (each rank's
:mod:`rankgate.harness.inplace.verdict`) and merge-junit (:mod:`rankgate.report.junit`)
all call :func:`combine`, so a test's merged verdict is the pool's verdict for the same
ranks' outcomes. Read top to bottom; the first row that matches decides:

==============================================  ===========  ============================
the ranks' outcomes                              verdict      why
==============================================  ===========  ============================
any failed, crashed, hung, interrupted,         failed       a rank went wrong in the body
diverged
any error (no failure)                          error        a set-up or tear-down failed
any not run (no failure, no error)              not run      a rank stopped the run first;
                                                             a rank without it died before
any missing (none of the above)                 error        a rank has no result for it
all the same                                    that one     (all xpassed under a strict
                                                             xfail marker: failed)
xfailed on some, xpassed on the others          xfailed      one body failed as expected;
                                                             the marker covers the test
anything else (passed beside skipped,           error        the ranks disagree
passed beside xfailed, ...)
==============================================  ===========  ============================

"xpassed" is a rank that passed under an xfail marker; "xfailed" one that failed under
it or called ``pytest.xfail()``. A rank's imperative ``pytest.xfail()`` beside ranks that
passed is therefore a disagreement, never an expected failure: nothing marked the test.
Standard library only: every wing reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rankgate.errors import RankgateError

RANK_OUTCOMES = (
    "passed",
    "failed",
    "error",
    "skipped",
    "xfailed",
    "xpassed",
    "crashed",
    "hung",
    "not run",
    "interrupted",
    "missing",
    "diverged",
)
"""Every word a rank's outcome may be. "interrupted": a signal stopped the run in this
test; "missing": the rank has no result for it; "diverged": its body returned, but its
ledger shows it skipped or changed a collective its peers issued."""

FAILING = frozenset({"failed", "crashed", "hung", "interrupted", "diverged"})
"""A rank that went wrong in the test's body: the test failed."""

VERDICTS = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "not run")
"""What :func:`combine` returns (each counted apart in every summary)."""

GREEN = frozenset({"passed", "skipped", "xfailed", "xpassed"})
"""Verdicts that leave a run green."""


class UnknownOutcome(RankgateError, ValueError):
    """A rank's outcome that is not one of RANK_OUTCOMES (a harness bug)."""


@dataclass(frozen=True, slots=True)
class Combined:
    """A test's verdict over its ranks."""

    verdict: str
    """One of VERDICTS."""
    disagree: bool = False
    """An error only because the ranks ended differently with none of them bad (the pool
    calls it a disagreement: "ranks disagree: ...")."""
    as_one: bool = False
    """xfailed because some ranks failed it as expected and the others passed it: the
    test's one body failed, as the pool counts it."""


def combine(outcomes: Mapping[int, str], *, strict: bool = False) -> Combined:
    """The verdict of a test whose ranks ended as ``outcomes`` ({rank: word}); see the
    module's table. ``strict``: the test's xfail marker is strict (an xpass fails it)."""
    kinds = {str(o) for o in outcomes.values()}
    unknown = kinds - set(RANK_OUTCOMES)
    if unknown:
        raise UnknownOutcome(
            f"unknown rank outcome {sorted(unknown)[0]!r}; one of {', '.join(RANK_OUTCOMES)}"
        )
    if kinds & FAILING:
        return Combined("failed")
    if "error" in kinds:
        return Combined("error")
    if "not run" in kinds:
        return Combined("not run")
    if "missing" in kinds:
        return Combined("error")
    if len(kinds) == 1:
        (kind,) = kinds
        return Combined("failed" if kind == "xpassed" and strict else kind)
    if kinds == {"xfailed", "xpassed"}:
        return Combined("xfailed", as_one=True)
    if not kinds:
        raise UnknownOutcome("no rank outcome to combine")
    return Combined("error", disagree=True)
