"""Per-rank results of a dispatched job, merged into one verdict and one report.

Each rank of a job writes ``junit.rank<R>.xml`` and ``rank<R>.log`` (its stdout and
stderr) into the job's directory, and in the harness's in-place mode ranks above 0 also
write their pytest terminal to ``pytest.rank<R>.log`` (:mod:`.sbatch` renders that).

The merge is ``rankgate merge-junit``'s (:mod:`rankgate.report.junit`): a test passes
only if it passed on every rank, fails if any rank failed it, and is an error when the
ranks disagree otherwise. A rank with no readable JUnit file (it crashed, was killed,
never started) is missing, and a job with a missing rank never passes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rankgate.dispatch.job_outcome import JobOutcome
from rankgate.report.junit import MergedReport, merge_files
from rankgate.report.junitfile import ReportInputError, read_junit

if TYPE_CHECKING:
    from rankgate.dispatch.ended import JobEnded
    from rankgate.dispatch.profile import Profile

LOG_TAIL_LINES = 40
DETAIL_LINES = 30
JUNIT_BASE = "junit.xml"
"""Given to pytest's --junitxml; the in-place harness writes junit.rank<R>.xml from it."""
MERGED_NAME = "junit.merged.xml"


def junit_name(rank: int | str) -> str:
    return f"junit.rank{rank}.xml"


def log_name(rank: int | str) -> str:
    return f"rank{rank}.log"


def log_names(rank: int | str) -> tuple[str, ...]:
    """A rank's logs: its pytest terminal (ranks > 0, in-place mode), then stdout/stderr."""
    return (f"pytest.rank{rank}.log", log_name(rank))


@dataclass(slots=True)
class JobResults:
    """Every rank's JUnit file of one job, merged."""

    world_size: int
    report: MergedReport | None
    """The merged report; None when no rank left a readable JUnit file."""
    missing_ranks: list[int]
    """Ranks without a readable JUnit file."""
    unreadable: list[str]
    """Why a rank's file could not be read (a file cut short by a kill, say)."""

    @property
    def tests(self):
        return self.report.tests if self.report else []

    def count(self, verdict: str) -> int:
        return sum(1 for test in self.tests if test.verdict == verdict)

    @property
    def failing_ranks(self) -> list[int]:
        red = ("failed", "error", "not run")
        bad = {r for t in self.tests if t.verdict in red for r in t.failing_ranks}
        return sorted(bad | set(self.missing_ranks))

    @property
    def passed(self) -> bool:
        return (
            self.report is not None
            and self.report.ok
            and not self.missing_ranks
            and any(t.verdict == "passed" for t in self.tests)
        )


def merge_job_dir(job_dir: Path, world_size: int) -> JobResults:
    """Merge ``junit.rank*.xml`` of ranks 0..world_size-1 found in ``job_dir``."""
    files, missing, unreadable = [], [], []
    for rank in range(world_size):
        path = job_dir / junit_name(rank)
        if not path.exists():
            missing.append(rank)
            continue
        try:
            files.append(read_junit(path))
        except ReportInputError as exc:
            missing.append(rank)
            unreadable.append(str(exc))
    report = merge_files(files, world_size) if files else None
    if report is not None:
        report.write_xml(job_dir / MERGED_NAME)
    return JobResults(world_size, report, missing, unreadable)


@dataclass(slots=True, kw_only=True)
class DispatchResult:
    """Everything known about one dispatched job once it ended."""

    profile: str
    target: str
    job_id: str
    outcome: JobOutcome
    state: str = ""
    """The target's raw final state (e.g. ``CANCELLED by 0``), verbatim."""
    exit_code: str = ""
    """SLURM's ``ExitCode`` (``code:signal``) or the container's exit code."""
    reason: str = ""
    message: str = ""
    """Verbatim error text for submit errors and infrastructure failures."""
    job_dir: Path | None = None
    """Local folder holding the job's files (the job directory itself, or a copy)."""
    merged: JobResults | None = None
    queued_s: float = 0.0
    running_s: float = 0.0
    node: str = ""
    """The node(s) the job ran on, as the target named them."""

    @classmethod
    def of(cls, profile: Profile, ended: JobEnded) -> DispatchResult:
        """The result of a job that ended (:func:`rankgate.dispatch.target.wait_for_job`);
        its results are attached by :meth:`attach` once fetched."""
        result = cls(
            profile=profile.name, target=profile.target, job_id=ended.job_id, outcome=ended.outcome
        )
        result.add_message(*ended.notes)
        watched = ended.watched
        if watched is not None:
            last = watched.last
            result.state, result.exit_code = last.state, last.exit_code
            result.reason = watched.why or last.reason
            result.queued_s, result.running_s = watched.queued_s, watched.running_s
            result.node = watched.where
        return result

    def add_message(self, *lines: str) -> None:
        """Add non-empty ``lines`` to the message, one per line."""
        self.message = "\n".join(x for x in (self.message, *lines) if x)

    def attach(self, folder: Path, world_size: int) -> None:
        """Merge the per-rank results found in ``folder``; write ``summary.json`` there."""
        self.job_dir = folder
        self.merged = merge_job_dir(folder, world_size)
        self.write_summary()

    @property
    def passed(self) -> bool:
        return (
            self.outcome is JobOutcome.COMPLETED and self.merged is not None and self.merged.passed
        )

    @property
    def exit_status(self) -> int:
        """0 passed, 1 the tests failed, 3 the job did not end by its own tests."""
        if self.passed:
            return 0
        return 3 if self.outcome.infrastructure else 1

    def to_json(self) -> dict:
        merged = self.merged
        return {
            "profile": self.profile,
            "target": self.target,
            "job_id": self.job_id,
            "outcome": self.outcome.value,
            "passed": self.passed,
            "state": self.state,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "message": self.message,
            "job_dir": str(self.job_dir) if self.job_dir else None,
            "queued_s": round(self.queued_s, 1),
            "running_s": round(self.running_s, 1),
            "node": self.node,
            "world_size": merged.world_size if merged else None,
            "missing_ranks": merged.missing_ranks if merged else None,
            "tests": [
                {"id": t.test_id, "verdict": t.verdict, "failing_ranks": list(t.failing_ranks)}
                for t in (merged.tests if merged else [])
            ],
        }

    def write_summary(self) -> Path | None:
        """Write ``summary.json`` into the local job folder; returns its path."""
        if self.job_dir is None or not self.job_dir.is_dir():
            return None
        path = self.job_dir / "summary.json"
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        return path


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return f"(no log: {path} does not exist)"
    cut = text[-lines:]
    head = [f"... ({len(text) - lines} earlier lines in {path})"] if len(text) > lines else []
    return "\n".join(head + cut)


def _head(text: str, lines: int) -> list[str]:
    kept = text.splitlines()
    return kept[:lines] + ([f"... ({len(kept) - lines} more lines)"] if len(kept) > lines else [])


def render_report(result: DispatchResult) -> str:
    """A human report: verdict line, failing tests by rank, and failing ranks' logs."""
    merged = result.merged
    verdict = "PASSED" if result.passed else "FAILED"
    lines = [
        f"rankgate dispatch: {verdict} - profile {result.profile} ({result.target}), "
        f"job {result.job_id or '-'}: {result.outcome.value}"
        + (f" [{result.state}]" if result.state else "")
        + (f" exit {result.exit_code}" if result.exit_code else "")
        + (f" reason {result.reason}" if result.reason and result.reason != "None" else "")
    ]
    if result.message:
        lines += ["", result.message.rstrip()]
    if merged is not None:
        if merged.report is not None:
            lines.append(merged.report.summary_line())
        if merged.missing_ranks:
            lines.append(f"ranks with no results: {merged.missing_ranks}")
        elif merged.report is not None and merged.report.ok and not merged.passed:
            lines.append("no test passed on the target (all skipped, or none collected)")
        lines += merged.unreadable
        for test in merged.tests:
            if test.verdict in ("failed", "error", "not run"):
                lines += ["", f"{test.verdict.upper()} {test.test_id}: {test.message}"]
                lines += _head(test.details, DETAIL_LINES)
        if result.job_dir is not None:
            for rank in merged.failing_ranks:
                for name in log_names(rank):
                    path = result.job_dir / name
                    if path.exists() or name == log_name(rank):
                        lines += ["", f"----- rank {rank}: {name} -----", _tail(path)]
    if result.job_dir is not None:
        lines += ["", f"job files: {result.job_dir}"]
    return "\n".join(lines)
