"""A world marker counts wherever pytest lets a user put it; one that comes too late to
act on is an error naming the test and the hook, never a silent single-process run."""

from __future__ import annotations

import textwrap

import pytest

pytestmark = pytest.mark.dist

BODY = """
import pytest
import torch.distributed as dist

{decorator}
def test_marked(rank):
    assert dist.get_world_size() == 2  # a plain run has no process group: it fails

def test_plain():
    assert not dist.is_initialized()
"""

CONFTEST_HOOKS = {
    "modifyitems": """
        def pytest_collection_modifyitems(items):
            for item in items:
                if item.name == "test_marked":
                    item.add_marker(pytest.mark.world(2))
        """,
    "modifyitems-tryfirst": """
        @pytest.hookimpl(tryfirst=True)
        def pytest_collection_modifyitems(items):
            for item in items:
                if item.name == "test_marked":
                    item.add_marker(pytest.mark.world(2))
        """,
    "modifyitems-trylast": """
        @pytest.hookimpl(trylast=True)
        def pytest_collection_modifyitems(items):
            for item in items:
                if item.name == "test_marked":
                    item.add_marker(pytest.mark.world(2))
        """,
    "itemcollected": """
        def pytest_itemcollected(item):
            if item.name == "test_marked":
                item.add_marker(pytest.mark.world(2))
        """,
}


def _conftest(inner, hook: str) -> None:
    inner.pytester.makeconftest("import pytest\n" + textwrap.dedent(CONFTEST_HOOKS[hook]))


IN_FILE = {
    "decorator": "@pytest.mark.world(2)\ndef test_marked(rank):",
    "pytestmark": "pytestmark = pytest.mark.world(2)\ndef test_marked(rank):",
    "parametrize-marks": "@pytest.mark.parametrize('x', [pytest.param(1, marks=pytest.mark.world(2))])"
    "\ndef test_marked(rank, x):",
}


@pytest.mark.parametrize("place", sorted(IN_FILE))
def test_marker_in_the_test_file_runs_on_two_ranks(inner, place):
    result, cases = inner.junit(
        source=f"""
import pytest
import torch.distributed as dist

{IN_FILE[place]}
    assert dist.get_world_size() == 2  # a plain run has no process group: it fails
"""
    )
    result.assert_outcomes(passed=1)
    (case,) = cases.values()
    assert inner.properties(case)["rankgate.world"] == "2"


@pytest.mark.parametrize("hook", sorted(CONFTEST_HOOKS))
def test_marker_added_by_a_conftest_hook_runs_on_two_ranks(inner, hook):
    _conftest(inner, hook)
    result, cases = inner.junit(source=BODY.format(decorator=""))
    result.assert_outcomes(passed=2)
    assert inner.properties(cases["test_marked"])["rankgate.world"] == "2"
    assert "rankgate.world" not in inner.properties(cases["test_plain"])


@pytest.mark.parametrize("hook", sorted(CONFTEST_HOOKS))
def test_marker_added_by_a_conftest_hook_counts_for_dash_m(inner, hook):
    """`-m dist` keeps the test a conftest made a world test, whichever order its hook runs in."""
    _conftest(inner, hook)
    source = BODY.format(decorator="")
    result, cases = inner.junit("-m", "dist", source=source)
    result.assert_outcomes(passed=1, deselected=1)
    assert set(cases) == {"test_marked"}
    result, cases = inner.junit("-m", "not dist", source=source)
    result.assert_outcomes(passed=1, deselected=1)
    assert set(cases) == {"test_plain"}


def test_invalid_marker_from_a_conftest_hook_is_a_collection_error(inner):
    inner.pytester.makeconftest(
        """
        import pytest

        def pytest_collection_modifyitems(items):
            for item in items:
                if item.name == "test_marked":
                    item.add_marker(pytest.mark.world(0))
        """
    )
    result = inner(BODY.format(decorator=""))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*test_inner.py::test_marked: invalid @pytest.mark.world: world size must be >= 1, got 0"]
    )
    result.assert_outcomes(errors=1)


def test_marker_added_in_collection_finish_is_a_collection_error_naming_the_hook(inner):
    inner.pytester.makeconftest(
        """
        import pytest

        def pytest_collection_finish(session):
            for item in session.items:
                if item.name == "test_marked":
                    item.add_marker(pytest.mark.world(2))
        """
    )
    result = inner(BODY.format(decorator=""))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*test_inner.py::test_marked: a world marker was added or changed too late to act "
            "on: rankgate reads world markers at the end of pytest_collection_modifyitems, and "
            "this one arrived in pytest_collection_finish",
            "*1 error during collection*",
        ]
    )
    result.assert_outcomes(errors=1)


def test_marker_added_in_runtest_setup_is_an_error_naming_the_hook(inner):
    inner.pytester.makeconftest(
        """
        import pytest

        def pytest_runtest_setup(item):
            if item.name == "test_marked":
                item.add_marker(pytest.mark.world(2))
        """
    )
    result = inner(BODY.format(decorator=""))
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*test_inner.py::test_marked: a world marker was added or changed too late*"
         "this one arrived in pytest_runtest_setup"]
    )


def test_a_second_different_marker_from_a_hook_is_a_collection_error(inner):
    _conftest(inner, "modifyitems")
    source = BODY.format(decorator="@pytest.mark.world(4)")
    result = inner(source)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*test_inner.py::test_marked: invalid @pytest.mark.world: the test has 2 different "
         "world markers (world(4), world(2)); keep one"]
    )
