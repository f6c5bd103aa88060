"""Run pytest under a launcher (torchrun, srun, mpirun) and collect every rank's output and verdict.

The harness's in-place mode runs the test files on each rank; rank 0 writes the
terminal, rank r > 0 writes ``pytest.rank<r>.log`` and every rank its own JUnit file
(docs/running-in-place.md). :func:`run_pytest_under` starts such a job in its own process
session with a deadline, and its :class:`LaunchedRun` gathers the launcher's output,
each rank's log and the merged verdicts, so a failing caller can put all of it in its
own report (``LaunchedRun.report()``). A job past its deadline is killed, whole, and
reported as timed out: a wrong launcher or a missing peer can never hang the caller.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rankgate.launch.launchers import launcher_argv
from rankgate.proc.command import finish
from rankgate.report.junit import merge_junit


@dataclass(frozen=True, slots=True)
class LaunchedRun:
    """What one launched pytest job left behind."""

    launcher: str
    argv: tuple[str, ...]
    returncode: int | None
    """None when the job was killed at its deadline."""
    stdout: str
    """The launcher's stdout: rank 0's terminal (and whatever the launcher prints)."""
    stderr: str
    out_dir: Path
    """Where the ranks wrote ``junit.rank<r>.xml`` and ``pytest.rank<r>.log``."""
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def rank_logs(self) -> dict[int, str]:
        """The terminal output of ranks > 0, by rank (rank 0's is ``stdout``)."""
        logs = {}
        for path in sorted(self.out_dir.glob("pytest.rank*.log")):
            rank = int(path.name.removeprefix("pytest.rank").removesuffix(".log"))
            logs[rank] = path.read_text(errors="replace")
        return logs

    def junit_files(self) -> list[Path]:
        return sorted(self.out_dir.glob("junit.rank*.xml"))

    def verdicts(self) -> dict[str, str]:
        """test id -> merged verdict over every rank (passed, failed, skipped, ...)."""
        files = self.junit_files()
        if not files:
            return {}
        return {t.test_id: t.verdict for t in merge_junit(files).tests}

    def skip_reasons(self) -> dict[str, str]:
        """test id -> the reason it was skipped (merged over the ranks)."""
        files = self.junit_files()
        if not files:
            return {}
        return {t.test_id: t.message for t in merge_junit(files).tests if t.verdict == "skipped"}

    def report(self, limit: int = 30_000) -> str:
        """Everything every rank said, for the report of a test that ran this job."""
        ending = "killed at its deadline" if self.timed_out else f"exit status {self.returncode}"
        parts = [
            f"{self.launcher} job: {' '.join(self.argv)}",
            f"{ending} after {self.seconds:.1f} s",
            f"--- launcher stdout (rank 0's terminal) ---\n{self.stdout[-limit:]}",
            f"--- launcher stderr ---\n{self.stderr[-limit:]}",
        ]
        for rank, text in self.rank_logs().items():
            parts.append(f"--- rank {rank} log (pytest.rank{rank}.log) ---\n{text[-limit:]}")
        return "\n".join(parts)


def run_pytest_under(  # launcher, ranks, pytest's arguments, then keyword-only settings
    launcher: str,
    nprocs: int,
    pytest_args: Sequence[str],
    *,
    cwd: Path,
    out_dir: Path,
    timeout: float,
    env: Mapping[str, str] | None = None,
    python: str | None = None,
) -> LaunchedRun:
    """Start ``launcher`` with ``nprocs`` ranks of ``python -m pytest ARGS`` and wait.

    JUnit files and rank logs go to ``out_dir``. The job runs in its own process
    session; past ``timeout`` seconds the whole session is killed. ``python``: the
    interpreter of the launcher and the ranks (:func:`launcher_argv`).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        *launcher_argv(launcher, nprocs, python),
        "-m", "pytest", "-p", "no:cacheprovider", "--color=no",
        f"--junitxml={out_dir / 'junit.xml'}", *pytest_args,
    ]  # fmt: skip
    done = finish(argv, cwd=cwd, env=os.environ if env is None else env, timeout=timeout, grace=10)
    return LaunchedRun(
        launcher, done.argv, done.returncode, done.stdout, done.stderr, out_dir, done.seconds
    )
