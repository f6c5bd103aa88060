"""A stage's coverage figure, where pytest-cov measures it: ``rankgate run --coverage`` or
``--cov=...`` among a stage's pytest args (``nox -s unit -- --cov=rankgate``). Every
rank's lines count (the harness hands the pool's ranks' data to pytest-cov); the figure
goes into the stage's outcome, the gate's table, summary.md and report.html.
"""

from __future__ import annotations

import json
from pathlib import Path

from rankgate.pipeline.options import Options


def coverage_report(out_dir: Path, stage: str) -> Path:
    """The stage's figure: pytest-cov's JSON report."""
    return out_dir / "coverage" / f"{stage}.json"


def coverage_args(stage: str, options: Options, env: dict[str, str]) -> list[str]:
    """The pytest args that write the stage's figure when pytest-cov is asked for, and
    its own data file in ``env`` (stages run side by side must not combine into one
    ``.coverage``). A figure an earlier run left is removed either way: it must never
    pass for this run's."""
    report = coverage_report(options.out_dir, stage)
    report.unlink(missing_ok=True)
    if not any(_measures(arg) for arg in options.pytest_args):
        return []
    report.parent.mkdir(parents=True, exist_ok=True)
    env["COVERAGE_FILE"] = str((report.parent / f".coverage.{stage}").resolve())
    return [f"--cov-report=json:{report}"]


def _measures(arg: str) -> bool:
    """``--cov`` or ``--cov=PATH``, not one of pytest-cov's other options."""
    return arg == "--cov" or arg.startswith("--cov=")


def covered_percent(report: Path) -> float | None:
    """The report's total, in percent; None without a readable report."""
    try:
        return float(json.loads(report.read_text())["totals"]["percent_covered"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
