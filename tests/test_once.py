"""tests/once.py: a fixture's value computed once per run, on two xdist workers too."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import tests.once

pytestmark = pytest.mark.unit

# Each computation and each test leaves a file in DONE: "computed-WHAT-WORKER-N",
# "used-WHAT-WORKER-N".
COUNTED = """
import itertools
import os
import subprocess
from pathlib import Path

import pytest

from tests.once import once_per_run

DONE = Path(os.environ["ONCE_DONE"])
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "alone")
COUNT = itertools.count()


def leave(kind, what):
    (DONE / f"{kind}-{what}-{WORKER}-{os.getpid()}-{next(COUNT)}").touch()


def compute(what):
    leave("computed", what)
    if what == "broken":
        raise RuntimeError("the planted computation failed")
    done = subprocess.CompletedProcess(["true"], 0, "out", "err")
    return {"what": what, "pair": (1, 2), "where": DONE, "done": done}


@pytest.fixture(scope="module", params=["a", "b"])
def shared(request):
    return once_per_run(request, lambda: compute(request.param))


@pytest.fixture(scope="module")
def broken(request):
    return once_per_run(request, lambda: compute("broken"))


@pytest.mark.parametrize("i", range(4))
def test_value(shared, i):
    # through JSON, with or without xdist
    assert shared["pair"] == [1, 2] and shared["where"] == DONE
    done = shared["done"]
    assert (done.args, done.returncode, done.stdout, done.stderr) == (["true"], 0, "out", "err")
    leave("used", shared["what"])


@pytest.mark.parametrize("i", range(4))
def test_broken(broken, i):
    pass
"""


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str):
    """Run COUNTED with ``args``: the result, and [(kind, what, worker)] of what it left."""
    done = pytester.path / "done"
    done.mkdir()
    monkeypatch.setenv("ONCE_DONE", str(done))
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "once.py").write_text(Path(tests.once.__file__).read_text())
    pytester.makepyfile(test_counted=textwrap.dedent(COUNTED))
    # Without the rankgate plugin: the helper needs none, and each worker spares torch's import.
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:rankgate", "-rA", *args
    )
    return result, sorted(tuple(p.name.split("-")[:3]) for p in done.iterdir())


def _computed(left: list[tuple[str, str, str]]) -> list[str]:
    return [what for kind, what, _ in left if kind == "computed"]


def test_alone_a_module_fixture_computes_once_per_parameter(pytester, monkeypatch):
    result, left = _run(pytester, monkeypatch)
    result.assert_outcomes(passed=8, errors=4)
    assert _computed(left) == ["a", "b", "broken"]


def test_two_workers_compute_each_value_once_and_share_it(pytester, monkeypatch):
    result, left = _run(pytester, monkeypatch, "-n", "2")
    result.assert_outcomes(passed=8, errors=4)
    assert _computed(left) == ["a", "b", "broken"]
    # xdist deals the first tests out in turn: both workers used "a", computed by one.
    assert {worker for kind, what, worker in left if (kind, what) == ("used", "a")} == {
        "gw0",
        "gw1",
    }
    # A failed computation, not repeated, fails every setup with its traceback.
    errors = "\n".join(result.outlines).split("= ERRORS =")[1].split("= PASSES =")[0]
    assert errors.count("RuntimeError: the planted computation failed") >= 4, errors
