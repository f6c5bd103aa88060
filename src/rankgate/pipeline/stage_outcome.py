"""What happened to one stage: :class:`Outcome`, kept as ``stages/<name>.json``.

:func:`record` keeps an outcome; :func:`refresh_report` rewrites out/report.html and
summary.md from everything kept so far. The gate refreshes after each of its steps, a
stage run alone after itself.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rankgate.pipeline.coverage import coverage_report, covered_percent
from rankgate.pipeline.options import Options
from rankgate.proc import command

Status = Literal["passed", "failed", "incomplete", "skipped"]
"""incomplete: it ran and proves nothing, never a pass: its selection ran no test, or a
signal stopped it (the tests that ran before are counted)."""
_REPORT_LOCK = threading.Lock()


@dataclass(kw_only=True, slots=True)
class Outcome:
    """What happened to one stage (or one of the gate's own steps, e.g. env-check)."""

    stage: str
    status: Status
    reason: str = ""
    """Why it failed, is incomplete or was skipped; for a pass, what it could not check."""
    seconds: float = 0.0
    products: tuple[str, ...] = ()
    """Product files that exist after the run."""
    selected: str = ""
    """With ``--changed-since``: why the change made it run (or, skipped, why not)."""
    not_affected: bool = False
    """Skipped because the change does not touch it: never blocks a gate."""
    empty_on_purpose: bool = False
    """Skipped because it selected no test and its stage says why it may
    (``Stage.empty_on_purpose``): never blocks a gate, not even under ``--strict``."""
    tests: dict[str, int] = field(default_factory=dict)
    """Its tests by outcome (passed ... xfailed, xpassed), from its JUnit; {} without one."""
    failing: list[str] = field(default_factory=list)
    """Its failed tests, ``id — message[: root-cause rank's error]``, from its JUnit: the
    table names them, so the last lines of a long log say what failed."""
    flaky: list[str] = field(default_factory=list)
    """Its flaky tests (failed, then passed a rerun: ``--rankgate-reruns``), ``id —
    attempts``, from its JUnit: counted apart from the passes and failures."""
    coverage: float | None = None
    """The percentage of lines its tests ran, every rank's counted, where pytest-cov
    measured it (``rankgate run --coverage``, ``nox -s unit -- --cov=rankgate``)."""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def record(outcome: Outcome, options: Options) -> None:
    """Keep the outcome as ``stages/<name>.json``, with its tests' counts and failures
    from its JUnit file."""
    # Imported here, as in refresh_report: the report's modules add 0.5 s to importing
    # the executor (measured on 2 busy cores), which every nox session would pay.
    from rankgate.report.json_summary import stage_counts, stage_failures, stage_flaky
    from rankgate.report.runinfo import write_stage_file

    out_dir = options.out_dir
    junit = out_dir / "junit" / f"{outcome.stage}.xml"
    outcome.tests = outcome.tests or stage_counts(junit)
    if outcome.status == "failed" and not outcome.failing:
        outcome.failing = stage_failures(junit)
    outcome.flaky = outcome.flaky or stage_flaky(junit)
    outcome.coverage = covered_percent(coverage_report(out_dir, outcome.stage))
    write_stage_file(out_dir, outcome.stage, outcome.to_json())


def refresh_report(out_dir: Path, log: Path | None = None) -> None:
    """Rewrite out/report.html and summary.md; the line saying so goes to ``log`` (a
    background stage's) or stderr. Never fails a stage."""
    from rankgate.report.report_command import write_quietly

    with _REPORT_LOCK:  # background stages finish at any time
        command.say(f"rankgate: {write_quietly(out_dir)}", log)
