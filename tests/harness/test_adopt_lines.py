"""An adoption line is checked when it is read: a ``setup=`` or ``teardown=`` callable
that does not import is a usage error naming the word, the callable and the installed
version of its package, in the pool and in place, before any test runs (a project whose
installed version lacks the callable, as DeepSpeed before 0.19.8 lacks
``_release_process_group_references``, got every test FAILED after its body ran)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from jobs import run_torchrun_pytest

from rankgate.harness.adopt.config import (
    AdoptConfigError,
    parse_spawn_helper,
    parse_world_class,
)
from rankgate.harness.adopt.targets import check_callables, check_parameters, installed

pytestmark = pytest.mark.dist

PROJECT = """
import torch.distributed as dist

RAN = []


def init():
    pass


NOT_A_FUNCTION = 3


class DistributedTest:
    world_size = 2
"""

TESTS = """
import torch
import torch.distributed as dist
from lineproj.common import DistributedTest


class TestComm(DistributedTest):
    def test_all_reduce(self):
        t = torch.ones(1)
        dist.all_reduce(t)
        assert t.item() == 2
"""

MISSING = "lineproj.common:release_groups"
LINE = f"lineproj.common:DistributedTest setup=lineproj.common:init teardown={MISSING}"


def _plant(pytester: pytest.Pytester, line: str) -> None:
    pkg = pytester.mkpydir("lineproj")
    (pkg / "common.py").write_text(PROJECT)
    pytester.makepyfile(test_planted=TESTS)
    pytester.makeini(f"[pytest]\nrankgate_world_classes =\n    {line}\n")


def _expected(line: str) -> str:
    return (
        f"*rankgate adoption: '{line}': teardown={MISSING} does not import (AttributeError: "
        "module 'lineproj.common' has no attribute 'release_groups'); imported: lineproj (no "
        "__version__) from *lineproj; docs/adopting.md lists the versions each adoption "
        "line was tried with*"
    )


def test_a_missing_callable_names_the_installed_version_of_its_package():
    with pytest.raises(AdoptConfigError) as raised:
        check_callables("l", parse_world_class("a.b:C teardown=pytest:no_such_reset"))
    message = str(raised.value)
    assert message.startswith("'l': teardown=pytest:no_such_reset does not import ("), message
    imported = f"imported: pytest {pytest.__version__} from {Path(pytest.__file__).parent};"
    assert imported in message, message


def test_a_callable_that_is_not_a_function_and_a_module_that_is_not_installed():
    with pytest.raises(AdoptConfigError, match="setup=pytest:__version__ is not callable"):
        check_callables("l", parse_world_class("a.b:C setup=pytest:__version__"))
    with pytest.raises(AdoptConfigError, match="no installed distribution provides 'no_such_pkg'"):
        check_callables("l", parse_world_class("a.b:C setup=no_such_pkg.x:init"))
    assert installed("pytest:main") == (
        f"imported: pytest {pytest.__version__} from {Path(pytest.__file__).parent}"
    )


def test_the_version_named_is_the_imported_modules_not_the_installed_distributions(
    tmp_path, monkeypatch
):
    # A copy on PYTHONPATH wins over the installed distribution: its version is named,
    # and the distribution's beside it. Before, only the distribution's was.
    copy = tmp_path / "pytest"
    copy.mkdir()
    (copy / "__init__.py").write_text("__version__ = '0.0.1'\n")
    monkeypatch.setitem(sys.modules, "pytest", _module_from(copy))
    assert installed("pytest:main") == (
        f"imported: pytest 0.0.1 from {copy} (installed: pytest {pytest.__version__})"
    )


def _module_from(folder):
    import importlib.util

    spec = importlib.util.spec_from_file_location("pytest", folder / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # a pytest run of its own
def test_a_missing_teardown_is_a_usage_error_in_the_pool(pytester):
    _plant(pytester, LINE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines([_expected(LINE)])
    assert "passed" not in result.stdout.str() and "failed" not in result.stdout.str()


@pytest.mark.slow  # a pytest run of its own
def test_the_same_line_without_the_missing_teardown_runs(pytester):
    line = "lineproj.common:DistributedTest setup=lineproj.common:init"
    _plant(pytester, line)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=1)


@pytest.mark.torch_dist
@pytest.mark.slow  # a torchrun of its own
def test_a_missing_teardown_is_a_usage_error_in_place(pytester):
    _plant(pytester, LINE)
    proc = run_torchrun_pytest(pytester.path, "-p", "no:randomly", "-q", timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out  # torchrun: a rank exited with pytest's usage error 4
    assert "exitcode  : 4" in out, out
    assert out.count(f"rankgate adoption: '{LINE}': teardown={MISSING} does not import") == 2, out
    assert " passed" not in out, out


def _spawn(body, world_size=2, args=()):  # a helper with no backend parameter
    raise AssertionError("never called: the line is checked, not the helper")


def _spawn_line_error(line: str) -> str:
    with pytest.raises(AdoptConfigError) as raised:
        check_parameters(line, parse_spawn_helper(line), _spawn)
    return str(raised.value)


def test_a_spawn_helper_word_naming_no_parameter_is_a_usage_error_saying_which_exist():
    # backend= defaults to 'backend': a helper without one ran every test its own way
    line = "p.t:spawn args=args"
    assert _spawn_line_error(line) == (
        "'p.t:spawn args=args': backend=backend (the default): p.t:spawn has no parameter "
        "'backend' (its parameters: body, world_size, args); name the one that holds it with "
        "backend=P, or backend=none (gloo)"
    )
    assert _spawn_line_error("p.t:spawn world=size backend=none") == (
        "'p.t:spawn world=size backend=none': world=size: p.t:spawn has no parameter 'size' "
        "(its parameters: body, world_size, args); name the one that holds it with world=P, "
        "or world=N for a fixed number"
    )
    assert "kwargs=options: p.t:spawn has no parameter 'options'" in _spawn_line_error(
        "p.t:spawn backend=none kwargs=options"
    )
    for fine in ("p.t:spawn backend=none args=args", "p.t:spawn world=4 backend=none func=body"):
        check_parameters(fine, parse_spawn_helper(fine), _spawn)  # raises nothing


@pytest.mark.slow  # a pytest run of its own
def test_a_spawn_helper_without_the_backend_parameter_is_a_usage_error_in_the_pool(pytester):
    pkg = pytester.mkpydir("helperless")
    (pkg / "testing.py").write_text("def spawn(body, world_size=2):\n    body()\n")
    pytester.makepyfile(
        test_planted="from helperless.testing import spawn\n\n"
        "def test_body():\n    spawn(lambda: None)\n"
    )
    line = "helperless.testing:spawn"
    pytester.makeini(f"[pytest]\nrankgate_spawn_helpers =\n    {line}\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines(
        [f"*rankgate adoption: '{line}': backend=backend (the default): {line} has no "
         "parameter 'backend' (its parameters: body, world_size); name the one that holds it "
         "with backend=P, or backend=none (gloo)*"]
    )  # fmt: skip
    assert "passed" not in result.stdout.str()
