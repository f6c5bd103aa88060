"""Run pytest under a launcher (torchrun, srun, mpirun) and collect every rank's output.

The harness's in-place mode runs the test files on each rank; rank 0 writes the
terminal, rank r > 0 writes ``pytest.rank<r>.log`` and every rank its own JUnit file
(docs/harness.md). :func:`run_pytest_under` starts such a job in its own process
session with a deadline, and its :class:`LaunchedRun` gathers the launcher's output,
each rank's log and the merged verdicts, so a failing caller can put all of it in its
own report (``LaunchedRun.report()``). A job past its deadline is killed, whole, and
reported as timed out: a wrong launcher or a missing peer can never hang the caller.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

LAUNCHERS = ("torchrun", "srun", "mpirun")


class LauncherUnavailable(RuntimeError):
    """The launcher's program is not installed here; the message says how to get it."""


def launcher_argv(launcher: str, nprocs: int) -> list[str]:
    """The command that starts ``nprocs`` copies of what follows it (``python -m ...``)."""
    if launcher == "torchrun":
        # torch.distributed.run under this interpreter: the torchrun on PATH may be another's.
        return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", str(nprocs)]  # fmt: skip
    if launcher == "srun":
        if shutil.which("srun") is None:
            raise LauncherUnavailable("srun is not installed: apt-get install slurm-wlm")
        # --immediate: fail at once when the cluster has no room, instead of queueing forever.
        return ["srun", "-n", str(nprocs), "--immediate=60", "--kill-on-bad-exit=1",
                sys.executable]  # fmt: skip
    if launcher == "mpirun":
        if shutil.which("mpirun") is None:
            raise LauncherUnavailable("mpirun is not installed: apt-get install openmpi-bin")
        root = ["--allow-run-as-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
        return ["mpirun", *root, "--oversubscribe", "-np", str(nprocs), sys.executable]
    raise ValueError(f"unknown launcher {launcher!r}; use one of {', '.join(LAUNCHERS)}")


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
        from rankgate.report.junit import merge_junit

        files = self.junit_files()
        if not files:
            return {}
        return {t.test_id: t.verdict for t in merge_junit(files).tests}

    def skip_reasons(self) -> dict[str, str]:
        """test id -> the reason it was skipped (merged over the ranks)."""
        from rankgate.report.junit import merge_junit

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
) -> LaunchedRun:
    """Start ``launcher`` with ``nprocs`` ranks of ``python -m pytest ARGS`` and wait.

    JUnit files and rank logs go to ``out_dir``. The job runs in its own process
    session; past ``timeout`` seconds the whole session is killed.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        *launcher_argv(launcher, nprocs),
        "-m", "pytest", "-p", "no:cacheprovider", "--color=no",
        f"--junitxml={out_dir / 'junit.xml'}", *pytest_args,
    ]  # fmt: skip
    start = time.monotonic()
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=dict(os.environ if env is None else env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # one kill reaches the launcher and every rank
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
        returncode: int | None = process.returncode
    except subprocess.TimeoutExpired:
        _kill_session(process)
        stdout, stderr = process.communicate()
        returncode = None
    return LaunchedRun(
        launcher, tuple(argv), returncode, stdout, stderr, out_dir, time.monotonic() - start
    )


def _kill_session(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
