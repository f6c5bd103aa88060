"""What pytest is told of a world test's verdict in the pool, as its call phase ends: a
failure or a disagreement raised, a skip, an xfail; the ranks' warnings and a returned
value as the warnings pytest gives a plain test."""

from __future__ import annotations

import warnings

import pytest

from rankgate.errors import RankgateError
from rankgate.harness import verdict_lines
from rankgate.harness.attempts import flaky_summary, is_flaky
from rankgate.harness.item_settings import skip_at_test
from rankgate.harness.outcome import RankOutcome
from rankgate.harness.pool import rankwarnings
from rankgate.harness.verdict import Verdict


class RankFailure(RankgateError, AssertionError):
    """Raised in the controller when any rank failed, crashed or hung."""


class RankDisagreement(RankgateError, RuntimeError):
    """Ranks ended the same test differently (say one skipped, one passed)."""


def tell_pytest(nodeid: str, run, verdict: Verdict, flaky_policy: str) -> None:
    """Raise as pytest expects for ``verdict``, the ranks' verdict of ``run`` (a
    ``worldrun.WorldRun``), after the ranks' warnings and returned values."""
    rankwarnings.warn_again([o.warnings for o in run.outcomes])
    _warn_of_returned_values(nodeid, run.outcomes)
    if verdict.status == "failed":
        raise RankFailure(verdict.summary)
    if is_flaky(run.attempts) and flaky_policy == "fail":
        raise RankFailure(flaky_summary(run.attempts, "fail"))
    if verdict.status == "disagreement":
        raise RankDisagreement(verdict.summary)
    if verdict.status == "skipped":
        skip_at_test(verdict.summary)
    if verdict.status == "xfailed":
        pytest.xfail(verdict.summary)


def _warn_of_returned_values(nodeid: str, outcomes: list[RankOutcome]) -> None:
    """pytest's warning for a test that returns a value, which it gives a plain test."""
    returned = {o.rank: o.returned for o in outcomes if o.returned}
    if returned:
        kinds = ", ".join(sorted(set(returned.values())))
        warnings.warn(
            pytest.PytestReturnNotNoneWarning(
                f"Test functions should return None, but {nodeid} returned {kinds} on "
                f"{verdict_lines.ranks(sorted(returned))}.\n"
                "Did you mean to use `assert` instead of `return`?"
            ),
            stacklevel=1,
        )
