"""Progress of long work: plain lines in CI logs, folded groups in GitHub Actions, rich on a terminal."""

from __future__ import annotations

import io
import re

import pytest

from rankgate.pipeline import executor, stage_commands
from rankgate.pipeline.options import Options
from rankgate.proc.progress import Progress, mode

pytestmark = pytest.mark.unit


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def no_forced_mode(monkeypatch):
    for name in ("RANKGATE_PROGRESS", "GITHUB_ACTIONS", "CI", "TERM"):
        monkeypatch.delenv(name, raising=False)


def run_two_steps(stream) -> str:
    progress = Progress(total=2, what="gate", stream=stream)
    with progress.step(1, "lint", "src/x.py matches **/*.py", spinner=False):
        print("ruff output", file=stream)
    progress.done(1, "passed", 1.25)
    with progress.step(2, "unit"):
        pass
    progress.done(2, "failed", 30.0, "pytest: exit code 1")
    return stream.getvalue()


def test_plain_lines_in_a_ci_log(monkeypatch):
    monkeypatch.setenv("CI", "true")
    assert mode(Tty()) == "plain"
    assert run_two_steps(io.StringIO()).splitlines() == [
        "rankgate: gate [1/2] lint started: src/x.py matches **/*.py",
        "ruff output",
        "rankgate: gate [1/2] passed in 1.2 s",
        "rankgate: gate [2/2] unit started",
        "rankgate: gate [2/2] failed in 30.0 s — pytest: exit code 1",
    ]


def test_github_actions_folds_each_step(monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert run_two_steps(io.StringIO()).splitlines() == [
        "::group::gate [1/2] lint — src/x.py matches **/*.py",
        "ruff output",
        "::endgroup::",
        "rankgate: gate [1/2] passed in 1.2 s",
        "::group::gate [2/2] unit",
        "::endgroup::",
        "rankgate: gate [2/2] failed in 30.0 s — pytest: exit code 1",
    ]


def test_rich_on_a_terminal():
    pytest.importorskip("rich", reason="rich is in the dev extra")
    stream = Tty()
    assert mode(stream) == "rich"
    styled = run_two_steps(stream)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", styled)
    assert "gate [1/2] lint ───" in text  # a rule per step
    assert "gate [2/2] unit running …" in text  # the spinner of in-process work
    assert "gate [2/2] failed in 30.0 s — pytest: exit code 1" in text
    assert "\x1b[1;31m[2/2] failed" in styled  # a failure in bold red


def test_a_pipe_is_plain_even_with_rich_installed():
    assert mode(io.StringIO()) == "plain"


def test_the_gate_reports_progress_per_stage(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr(executor.command, "run", lambda argv, **kw: 0)
    monkeypatch.setattr(stage_commands, "module_missing", lambda name: None)
    out = tmp_path / "out"
    executor.run_gate(Options(out_dir=out), include=("unit", "dist"))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("rankgate: gate")]
    # dist runs in the background beside unit: its step is shown once unit's has ended
    assert lines == [
        "rankgate: gate [1/3] env-check started",
        "rankgate: gate [1/3] passed in 0.0 s",
        f"rankgate: gate runs dist in the background; output: {out / 'logs' / 'dist.log'}",
        "rankgate: gate [2/3] unit started",
        "rankgate: gate [2/3] passed in 0.0 s",
        f"rankgate: gate [3/3] dist started: ran in the background; its output, from "
        f"{out / 'logs' / 'dist.log'}:",
        "rankgate: gate [3/3] passed in 0.0 s",
    ]
