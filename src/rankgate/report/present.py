"""Words both renderers use: the machine rows, the counts line, a stage's note.

The HTML page and summary.md say the same things; this module says them once.
"""

from __future__ import annotations

from rankgate.harness import verdict_lines
from rankgate.report.results import OUTCOMES
from rankgate.report.runinfo import gpu_summary

VERDICT_TITLES = {"passed": "passed", "failed": "FAILED", "incomplete": "INCOMPLETE"}


def counts_text(totals: dict) -> str:
    """``12 tests: 9 passed, 2 failed, 0 error, 1 skipped, 0 xfailed, 0 xpassed``."""
    if not totals:
        return "no test results"
    counts = ", ".join(f"{totals.get(k, 0)} {k}" for k in OUTCOMES)
    return f"{verdict_lines.count(totals.get('tests', 0), 'test')}: {counts}"


def incomplete_text(incomplete: dict[str, list[str]]) -> str:
    """Why a run is incomplete, or "" when it is not."""
    parts = []
    if incomplete.get("interrupted"):
        parts.append(f"interrupted during {', '.join(incomplete['interrupted'])} (no outcome)")
    if incomplete.get("stages"):
        parts.append(f"incomplete stages: {'; '.join(incomplete['stages'])}")
    if incomplete.get("never ran"):
        parts.append(f"never ran: {', '.join(incomplete['never ran'])}")
    if incomplete.get("stopped"):
        parts.append(f"stopped: {'; '.join(incomplete['stopped'])}")
    return "; ".join(parts)


def machine_rows(run: dict | None) -> list[tuple[str, str]]:
    """(name, value) rows of the machine, commit and command; one row saying none without."""
    if not run:
        return [("recorded", "no (no run.json: results given by hand, or copied without it)")]
    m = run.get("machine") or {}
    versions = " · ".join(
        f"{name} {m[key]}"
        for name, key in (("driver", "driver"), ("CUDA", "cuda"), ("NCCL", "nccl"))
        if m.get(key)
    )
    rows = [
        ("host", f"{m.get('hostname', '?')} ({m.get('os', '?')}, {m.get('cpus', '?')} CPUs)"),
        ("GPUs", gpu_summary(m)),
    ]
    if m.get("topology"):
        rows.append(("GPU topology", str(m["topology"])))
    rows += [
        ("driver · CUDA · NCCL", versions or "none (CPU-only torch, or no NVIDIA driver)"),
        ("torch · Python", f"torch {m.get('torch', '?')} · Python {m.get('python', '?')}"),
    ]
    if m.get("launchers"):
        rows.append(("launchers", ", ".join(f"{k} {v}" for k, v in m["launchers"].items())))
    rows += [
        ("commit", str(run.get("commit") or "not a git checkout")),
        ("command", str(run.get("command") or "?")),
        ("started", str(run.get("started") or "?")),
    ]
    return rows


def stage_note(stage: dict) -> str:
    """The reason column of a stage row."""
    why = stage.get("reason") or ""
    selected = stage.get("selected") or ""
    if selected and selected != why:
        why = "; ".join(filter(None, (why, f"ran: {selected}")))
    if stage.get("status") == "running":
        why = "interrupted: it started and never recorded an outcome"
    return why


def stage_tests(stage: dict) -> str:
    """``40 passed, 2 skipped`` from a stage's test counts (only the non-zero ones)."""
    tests = stage.get("tests") or {}
    counted = [f"{tests[k]} {k}" for k in OUTCOMES if tests.get(k)]
    if stage.get("flaky"):  # among the passes (or failures, under --rankgate-flaky=fail)
        counted.append(f"{len(stage['flaky'])} flaky")
    if stage.get("coverage") is not None:  # where pytest-cov measured it, every rank's lines
        counted.append(f"coverage {stage['coverage']:.1f}%")
    return ", ".join(counted)


def stage_rows(stages: list[dict], incomplete: dict[str, list[str]]) -> list[dict]:
    """The stages that ran, then one row per planned stage that never ran."""
    never = [{"stage": name, "status": "never ran", "seconds": 0,
              "reason": "planned, but the run ended before it"}
             for name in incomplete.get("never ran", [])]  # fmt: skip
    return [*stages, *never]
