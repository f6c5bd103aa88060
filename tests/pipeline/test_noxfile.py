"""noxfile.py's sessions: a failed stage errors; a skipped one skips, or errors under --strict."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rankgate.pipeline import executor, stages
from rankgate.pipeline.executor import Outcome

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def noxfile():
    spec = importlib.util.spec_from_file_location("rankgate_noxfile", ROOT / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Ended(Exception):
    """How the fake session ends: ('error' | 'skip', message)."""


class FakeSession:
    def __init__(self, *posargs: str) -> None:
        self.posargs = list(posargs)

    def error(self, message: str):
        raise Ended("error", message)

    def skip(self, message: str):
        raise Ended("skip", message)


@pytest.fixture
def skipped(monkeypatch):
    why = "actionlint not on PATH, not run"
    monkeypatch.setattr(
        executor, "run_stage", lambda *a, **k: Outcome(stage="lint", status="skipped", reason=why)
    )


def end(noxfile, *posargs: str) -> tuple[str, str]:
    with pytest.raises(Ended) as ended:
        noxfile._session_for(stages.get("lint"))(FakeSession(*posargs))
    return ended.value.args


def test_a_skipped_stage_skips_the_session(noxfile, skipped):
    assert end(noxfile) == ("skip", "actionlint not on PATH, not run")


def test_a_skipped_stage_under_strict_fails_the_session(noxfile, skipped):
    assert end(noxfile, "--strict") == (
        "error",
        "lint skipped under --strict: actionlint not on PATH, not run",
    )


def test_a_stage_the_change_does_not_touch_skips_even_under_strict(noxfile, monkeypatch):
    why = "not affected: none of the 1 changed file is under its paths"
    monkeypatch.setattr(
        executor,
        "run_stage",
        lambda *a, **k: Outcome(stage="lint", status="skipped", reason=why, not_affected=True),
    )
    assert end(noxfile, "--strict", "--changed-since", "main") == ("skip", why)


@pytest.mark.parametrize(
    ("session", "posargs", "quick"),
    [
        ("gate", (), True),
        ("gate", ("--full",), False),
        ("unit", (), False),
        ("unit", ("--quick",), True),
    ],
)
def test_the_gate_is_quick_unless_full_and_a_stage_runs_in_full(
    noxfile, monkeypatch, session, posargs, quick
):
    seen = []

    def record(options, *args, **kwargs):
        seen.append(options.quick)
        return [Outcome(stage="unit", status="passed")]

    monkeypatch.setattr(executor, "run_gate", record)
    monkeypatch.setattr(executor, "run_stage", lambda stage, options: record(options)[0])
    noxfile._session_for(stages.get(session))(FakeSession(*posargs))
    assert seen == [quick]
