"""Per-rank results of a dispatched job, merged into one verdict and one report.

Each rank of a job writes ``junit.rank<R>.xml`` and ``rank<R>.log`` (its stdout and
stderr) into the job's directory, and in the harness's in-place mode ranks above 0 also
write their pytest terminal to ``pytest.rank<R>.log`` (:mod:`.sbatch` renders that).

The merge rule is the harness's: a test
passes only if it passed on every rank; it fails if any rank failed it; ranks that
disagree otherwise (one skipped, one passed; a test one rank never ran) is an error.
A rank with no JUnit file at all (it crashed, was killed, never started) is missing,
and a job with a missing rank never passes.

rankgate.report.junit (the merge-junit command) did not exist when this was
written, so the JUnit reading here is the package's own and deliberately small.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from rankgate.dispatch.outcome import Outcome

LOG_TAIL_LINES = 40
JUNIT_BASE = "junit.xml"
"""Given to pytest's --junitxml; the in-place harness writes junit.rank<R>.xml from it."""


def junit_name(rank: int | str) -> str:
    return f"junit.rank{rank}.xml"


def log_name(rank: int | str) -> str:
    return f"rank{rank}.log"


def log_names(rank: int | str) -> tuple[str, ...]:
    """A rank's logs: its pytest terminal (ranks > 0, in-place mode), then stdout/stderr."""
    return (f"pytest.rank{rank}.log", log_name(rank))


@dataclass(frozen=True, slots=True)
class TestVerdict:
    """One test across all ranks."""

    nodeid: str
    outcome: str
    """passed, failed, error or skipped."""
    failing_ranks: tuple[int, ...] = ()
    messages: dict[int, str] = field(default_factory=dict)
    """Rank -> failure text, for the ranks that did not pass."""


@dataclass(slots=True)
class MergedResults:
    """Every rank's JUnit file merged into per-test verdicts."""

    world_size: int
    tests: list[TestVerdict]
    missing_ranks: list[int]
    """Ranks that left no JUnit file."""

    def count(self, outcome: str) -> int:
        return sum(1 for test in self.tests if test.outcome == outcome)

    @property
    def failing_ranks(self) -> list[int]:
        ranks = {r for test in self.tests for r in test.failing_ranks}
        return sorted(ranks | set(self.missing_ranks))

    @property
    def passed(self) -> bool:
        bad = self.count("failed") + self.count("error")
        return not bad and not self.missing_ranks and bool(self.tests)


def read_junit(path: Path) -> dict[str, tuple[str, str]]:
    """nodeid -> (outcome, message) for every testcase in one rank's JUnit file."""
    cases: dict[str, tuple[str, str]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        nodeid = f"{classname}::{name}" if classname else name
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                message = "\n".join(x for x in (child.get("message"), child.text) if x)
                break
        cases[nodeid] = (outcome, message)
    return cases


def merge_job_dir(job_dir: Path, world_size: int) -> MergedResults:
    """Merge ``junit.rank*.xml`` of ranks 0..world_size-1 found in ``job_dir``."""
    per_rank: dict[int, dict[str, tuple[str, str]]] = {}
    missing: list[int] = []
    for rank in range(world_size):
        path = job_dir / junit_name(rank)
        try:
            per_rank[rank] = read_junit(path)
        except (FileNotFoundError, ET.ParseError):
            missing.append(rank)
    nodeids = sorted({nodeid for cases in per_rank.values() for nodeid in cases})
    tests = [_merge_one(nodeid, per_rank) for nodeid in nodeids]
    return MergedResults(world_size=world_size, tests=tests, missing_ranks=missing)


def _merge_one(nodeid: str, per_rank: dict[int, dict[str, tuple[str, str]]]) -> TestVerdict:
    outcomes = {
        rank: cases.get(nodeid, ("error", "not run on this rank"))
        for rank, cases in per_rank.items()
    }
    bad = {r: msg for r, (out, msg) in outcomes.items() if out in ("failed", "error")}
    kinds = {out for out, _ in outcomes.values()}
    if bad:
        outcome = "failed" if any(outcomes[r][0] == "failed" for r in bad) else "error"
        return TestVerdict(nodeid, outcome, tuple(sorted(bad)), bad)
    if kinds == {"passed"}:
        return TestVerdict(nodeid, "passed")
    if kinds == {"skipped"}:
        return TestVerdict(nodeid, "skipped")
    disagree = {r: f"{out} on rank {r}" for r, (out, _) in outcomes.items()}
    return TestVerdict(nodeid, "error", tuple(sorted(disagree)), disagree)


@dataclass(slots=True, kw_only=True)
class DispatchResult:
    """Everything known about one dispatched job once it ended."""

    profile: str
    target: str
    job_id: str
    outcome: Outcome
    state: str = ""
    """The target's raw final state (e.g. ``CANCELLED by 0``), verbatim."""
    exit_code: str = ""
    """SLURM's ``ExitCode`` (``code:signal``) or the container's exit code."""
    reason: str = ""
    message: str = ""
    """Verbatim error text for submit errors and infrastructure failures."""
    job_dir: Path | None = None
    """Local folder holding the job's files (the job directory itself, or a copy)."""
    merged: MergedResults | None = None
    queued_s: float = 0.0
    running_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.COMPLETED and self.merged is not None and self.merged.passed

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
            "world_size": merged.world_size if merged else None,
            "missing_ranks": merged.missing_ranks if merged else None,
            "tests": [
                {"nodeid": t.nodeid, "outcome": t.outcome, "failing_ranks": list(t.failing_ranks)}
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
        lines.append(
            f"{len(merged.tests)} tests on {merged.world_size} ranks: "
            f"{merged.count('passed')} passed, {merged.count('failed')} failed, "
            f"{merged.count('error')} errors, {merged.count('skipped')} skipped"
        )
        if merged.missing_ranks:
            lines.append(f"ranks with no results: {merged.missing_ranks}")
        for test in merged.tests:
            if test.outcome in ("failed", "error"):
                lines.append(
                    f"{test.outcome.upper()} {test.nodeid} on ranks {list(test.failing_ranks)}"
                )
                for rank, text in sorted(test.messages.items()):
                    first = text.strip().splitlines()[:1]
                    lines.append(f"    rank {rank}: {first[0] if first else '(no message)'}")
        if result.job_dir is not None:
            for rank in merged.failing_ranks:
                for name in log_names(rank):
                    path = result.job_dir / name
                    if path.exists() or name == log_name(rank):
                        lines += ["", f"----- rank {rank}: {name} -----", _tail(path)]
    if result.job_dir is not None:
        lines += ["", f"job files: {result.job_dir}"]
    return "\n".join(lines)
