"""Hypothesis beside rankgate: ``@given`` on a world test.

Hypothesis fails a test that takes a function-scoped fixture ("not reset between
inputs"). rankgate's ``rank``, ``world_size`` and ``device`` are function-scoped only
because they read the test's world marker; their values are the same for every input,
so on a world test taking them (and no function-scoped fixture of the project's own)
that health check is suppressed. A fixture of the project's own still trips it.

Every rank draws the same examples (``rankstate.same_examples_on_every_rank`` seeds
each rank's Hypothesis with the test's seed); ``agree_on_each_example`` keeps them in
step when one rank fails an example.
"""

from __future__ import annotations

import functools
import os
import sys

import pytest

RANK_CONSTANTS = frozenset({"rank", "world_size", "device"})
"""rankgate's fixtures whose value is the same for every input Hypothesis draws."""
HYPOTHESIS_BRIDGE = "rankgate-hypothesis-bridge"


def _function_scoped_arguments(item: pytest.Item) -> set[str]:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    scoped = set()
    for name in info.argnames:
        defs = info.name2fixturedefs.get(name)
        if defs and defs[-1].scope == "function":
            scoped.add(name)
    return scoped


def allow_rank_fixtures(item: pytest.Item) -> None:
    """Suppress the function-scoped-fixture health check of a world test whose only
    function-scoped fixtures are rankgate's per-rank constants."""
    if "hypothesis" not in sys.modules or item.get_closest_marker("world") is None:
        return
    function = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
    if not getattr(function, "is_hypothesis_test", False):
        return
    scoped = _function_scoped_arguments(item)
    if not scoped or not scoped <= RANK_CONSTANTS:
        return
    from hypothesis import HealthCheck, settings

    current = getattr(function, "_hypothesis_internal_use_settings", settings.default)
    if HealthCheck.function_scoped_fixture in current.suppress_health_check:
        return
    function._hypothesis_internal_use_settings = settings(
        parent=current,
        suppress_health_check=[*current.suppress_health_check, HealthCheck.function_scoped_fixture],
    )


class HypothesisBridge:
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            allow_rank_fixtures(item)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call):
        """In place: a rank that passed every example another rank failed passes; the
        failing rank's report carries the example (the pool's worker does the same)."""
        report = yield
        excinfo = call.excinfo
        if call.when == "call" and excinfo and excinfo.errisinstance(AnotherRankFailedExample):
            report.outcome, report.longrepr = "passed", None
        return report


def register(config: pytest.Config) -> None:
    if config.pluginmanager.has_plugin("hypothesispytest"):
        config.pluginmanager.register(HypothesisBridge(), HYPOTHESIS_BRIDGE)


class AnotherRankFailedExample(Exception):
    """Raised on a rank that passed an example another rank failed: Hypothesis then
    shrinks the same way on every rank (their collectives stay matched). This rank's
    own verdict is a pass; the failing rank reports the example."""


_EXAMPLE_PASSED, _EXAMPLE_REJECTED, _EXAMPLE_FAILED = 0, 1, 2
_AGREEING = "_rankgate_agreeing"


def is_bridge_file(filename: str) -> bool:
    """Whether a traceback's frame is this module's (left out: the test's own frames
    explain its failure)."""
    return os.path.abspath(filename) == os.path.abspath(__file__)


def _not_an_explanation() -> None:
    """Hypothesis explains a failure by the lines only failing examples ran; this
    module's handling of a failed example is such a line, and says nothing of the test:
    Hypothesis leaves it out, as it does pytest's own files."""
    try:
        from hypothesis.internal import scrutineer
    except ImportError:  # a Hypothesis without explanations
        return
    unhelpful = getattr(scrutineer, "UNHELPFUL_LOCATIONS", None)
    ours = "/rankgate/harness/hypothesis_bridge.py"
    if isinstance(unhelpful, tuple) and ours not in unhelpful:
        scrutineer.UNHELPFUL_LOCATIONS = (*unhelpful, ours)


def agree_on_each_example(function) -> None:
    """Wrap the body Hypothesis calls for each example so that the ranks agree on its
    outcome. Hypothesis chooses the next example from the last one's outcome: when one
    rank failed an example the others passed, it shrank on that rank and drew new
    examples on the others, and their next collective mismatched (gloo aborts)."""
    inner = getattr(getattr(function, "hypothesis", None), "inner_test", None)
    if inner is None or getattr(inner, _AGREEING, False):
        return
    _not_an_explanation()

    def each_example(*args, **kwargs):
        __tracebackhide__ = True  # a failure's traceback and Hypothesis's explanation
        from hypothesis.errors import UnsatisfiedAssumption

        code, failure = _EXAMPLE_PASSED, None
        try:
            inner(*args, **kwargs)
        except (KeyboardInterrupt, SystemExit):
            raise
        except UnsatisfiedAssumption as exc:
            code, failure = _EXAMPLE_REJECTED, exc
        except BaseException as exc:
            code, failure = _EXAMPLE_FAILED, exc
        codes = _exchange(code)
        if failure is not None:
            raise failure
        failed = [r for r, c in enumerate(codes) if c == _EXAMPLE_FAILED]
        if failed:
            ranks = ", ".join(map(str, failed))
            raise AnotherRankFailedExample(f"rank(s) {ranks} failed this example")
        if _EXAMPLE_REJECTED in codes:
            raise UnsatisfiedAssumption("another rank rejected this example (assume)")

    functools.update_wrapper(each_example, inner)  # its name in "Failing test case"
    setattr(each_example, _AGREEING, True)
    function.hypothesis.inner_test = each_example


def _exchange(code: int) -> list[int]:
    """Every rank's outcome code, through the test's default group."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        return [code]
    backend = str(dist.get_backend())
    device = "cpu"
    if "nccl" in backend and "gloo" not in backend:
        device = torch.device("cuda", torch.cuda.current_device())
    codes = torch.zeros(dist.get_world_size(), dtype=torch.int32, device=device)
    codes[dist.get_rank()] = code
    # Past the ledger's wrapper: rankgate's own agreement is none of the test's collectives
    # (counted, it would shift every later call's number and stand in hang verdicts).
    unrecorded = getattr(dist.all_reduce, "__wrapped__", dist.all_reduce)
    unrecorded(codes)
    return codes.tolist()
