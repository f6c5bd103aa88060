"""A stage dispatched as N jobs, one shard of its tests each, merged into one verdict.

:func:`run_shards` is :func:`~rankgate.dispatch.run.run_stage` for ``shards = N > 1``:

1. The durations file (the profile's ``durations``) is read where the jobs will read it
   (on the cluster, through the target's shell) and copied into each job's folder, so
   every shard splits by the same times even when a shard that ended first has stored
   new ones (a job that queued longer would otherwise split by other times and lose or
   repeat tests).
2. The tests are collected here, and split as the jobs will split them
   (:func:`rankgate.harness.shards.split.split`): what each shard is to run is known
   before any job runs, so a shard whose job is lost still counts its tests, not run.
3. The N jobs are submitted and waited for side by side (a thread each, one interrupt
   guard for all: a Ctrl-C cancels every shard), then fetched and merged
   (:func:`rankgate.report.shard_merge.merge_shards`).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from rankgate.dispatch.interrupts import caught_interrupts
from rankgate.dispatch.job import JobSpec
from rankgate.dispatch.job_outcome import JobOutcome
from rankgate.dispatch.job_result import MERGED_NAME, DispatchResult, render_report
from rankgate.dispatch.target import Target, TargetError, run_job
from rankgate.dispatch.watch import Progress, WaitPolicy
from rankgate.harness.shards.durations import DurationsError, checked
from rankgate.harness.shards.split import split
from rankgate.proc.command import CommandFailed, finish
from rankgate.report.junit import MergedReport
from rankgate.report.shard_merge import SHARD_FILE, ShardRun, merge_shards, shard_file

SNAPSHOT_NAME = "durations.in.json"
"""The durations a shard splits by, copied into its job folder before it is submitted."""
COLLECT_TIMEOUT_S = 600.0


@dataclass(slots=True, kw_only=True)
class ShardedResult:
    """Every shard's :class:`DispatchResult` and the one verdict over them."""

    stage: str
    shards: list[DispatchResult]
    runs: list[ShardRun]
    merged: MergedReport
    folder: Path | None
    """Local folder holding the merged JUnit file (``junit.merged.xml``) and summary.json."""
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    empty: tuple[int, ...] = ()
    """Shards no test fell to (never submitted)."""

    @property
    def job_dir(self) -> Path | None:  # where dispatch_stage finds the merged JUnit file
        return self.folder

    @property
    def passed(self) -> bool:
        ran = [s for k, s in enumerate(self.shards, start=1) if k not in self.empty]
        return bool(ran) and all(shard.passed for shard in ran) and self.merged.ok

    @property
    def exit_status(self) -> int:
        """0 passed, 3 when a shard's job did not end by its own tests, else 1."""
        if self.passed:
            return 0
        return 3 if any(s.outcome.infrastructure for s in self.shards) else 1

    def to_json(self) -> dict:
        return {
            "stage": self.stage,
            "passed": self.passed,
            "wall_s": round(self.wall_s, 1),
            "folder": str(self.folder) if self.folder else None,
            "notes": self.notes,
            "shards": [
                {
                    **shard.to_json(),
                    "shard": run.name,
                    "expected": None if run.expected is None else len(run.expected),
                }
                for shard, run in zip(self.shards, self.runs, strict=True)
            ],
            "merged": self.merged.to_dict(),
        }


def shard_stage(stage: str, k: int, n: int) -> str:
    """The stage name a shard's job carries (its folder and job name start with it)."""
    return f"{stage}-shard{k}of{n}"


def run_shards(
    target: Target,
    *,
    stage: str,
    pytest_args: Sequence[str],
    wait: WaitPolicy,
    say: Progress,
    local_dir: Path | None,
    collect_cwd: Path | None = None,
) -> ShardedResult:
    """Dispatch ``pytest pytest_args`` as ``profile.shards`` jobs (see the module docstring)."""
    profile = target.profile
    n = profile.shards
    start = time.monotonic()
    notes: list[str] = []
    durations = _read_durations(target, notes)
    expected = _expected(pytest_args, durations, n, collect_cwd, notes)
    try:
        jobs = [
            _shard_job(target, stage, pytest_args, k, durations, expected) for k in range(1, n + 1)
        ]
    except CommandFailed as exc:  # the job folders are out of reach: no job was submitted
        raise TargetError(f"cannot write the shards' files on the target: {exc}") from None
    say(f"{stage}: {n} shards, {_plan(expected)}")
    # A shard no test fell to is not submitted: its pytest would find nothing and fail.
    empty = {k for k in range(1, n + 1) if expected is not None and not expected[k - 1]}
    notes += [f"shard {k}/{n}: no test fell to it, not submitted" for k in sorted(empty)]
    results = _run_side_by_side(target, jobs, empty, wait, say, local_dir)
    runs = [
        ShardRun(
            index=k,
            count=n,
            job_id=result.job_id,
            node=result.node,
            ended="no tests, not submitted" if k in empty else result.outcome.value,
            report=result.merged.report if result.merged else None,
            expected=tuple(expected[k - 1]) if expected else None,
        )
        for k, result in enumerate(results, start=1)
    ]
    merged = merge_shards(runs)
    folder = _merged_folder(results, local_dir, stage)
    sharded = ShardedResult(
        stage=stage,
        shards=results,
        runs=runs,
        merged=merged,
        folder=folder,
        notes=notes,
        wall_s=time.monotonic() - start,
        empty=tuple(sorted(empty)),
    )
    if folder is not None:
        merged.write_xml(folder / MERGED_NAME)
        (folder / "summary.json").write_text(json.dumps(sharded.to_json(), indent=2) + "\n")
    return sharded


def _run_side_by_side(
    target: Target,
    jobs: list[JobSpec],
    empty: set[int],
    wait: WaitPolicy,
    say: Progress,
    local_dir: Path | None,
) -> list[DispatchResult]:
    """Each shard's job but the ``empty`` ones submitted, waited for and fetched, a thread
    each under one interrupt guard (a Ctrl-C cancels every shard); shard K's result K-1th."""
    n = len(jobs)
    with caught_interrupts() as interrupts, ThreadPoolExecutor(max_workers=n) as pool:
        futures = {
            k: pool.submit(
                run_job,
                target,
                job,
                wait,
                say=_prefixed(say, f"shard {k}/{n}"),
                local=local_dir / f"shard{k}" if local_dir else None,
                interrupts=interrupts,
            )
            for k, job in enumerate(jobs, start=1)
            if k not in empty
        }
        return [
            futures[k].result() if k in futures else _not_submitted(target.profile)
            for k in range(1, n + 1)
        ]


def _shard_job(
    target: Target,
    stage: str,
    pytest_args: Sequence[str],
    k: int,
    durations: dict[str, float] | None,
    expected: list[list[str]] | None,
) -> JobSpec:
    """Shard ``k``'s job, and its files in its job folder (SLURM)."""
    profile = target.profile
    n = profile.shards
    job = target.job(shard_stage(stage, k, n), pytest_args)
    # name=value: pytest counts an existing path given apart among the paths that
    # choose its rootdir, and a rootdir above the suite's changes every node id
    extra = [f"--rankgate-shard={k}/{n}"]
    if profile.durations and hasattr(target, "shell"):
        # Always a snapshot, {} on the first run: a shard must never read times
        # another shard stored after the split was made.
        snapshot = f"{job.job_dir}/{SNAPSHOT_NAME}"
        target.shell.write_file(snapshot, json.dumps(durations or {}, indent=1) + "\n")
        extra += [f"--rankgate-durations={snapshot}"]
        extra += [f"--rankgate-store-durations={profile.durations}"]
    elif profile.durations:
        extra += [f"--rankgate-durations={profile.durations}"]  # in the pod: read only
    if hasattr(target, "shell"):  # its folder alone can be merged again (merge-junit --shards)
        mine = expected[k - 1] if expected else None
        target.shell.write_file(f"{job.job_dir}/{SHARD_FILE}", shard_file(k, n, mine))
    return replace(job, pytest_args=(*job.pytest_args, *extra))


def _not_submitted(profile) -> DispatchResult:
    return DispatchResult(
        profile=profile.name,
        target=profile.target,
        job_id="",
        outcome=JobOutcome.COMPLETED,
        message="no test fell to this shard: not submitted",
    )


def _prefixed(say: Progress, prefix: str) -> Progress:
    return lambda line: say(f"{prefix}: {line}")


def _plan(expected: list[list[str]] | None) -> str:
    if expected is None:
        return "tests per shard unknown (collection failed)"
    return "tests per shard: " + ", ".join(str(len(ids)) for ids in expected)


def _read_durations(target: Target, notes: list[str]) -> dict[str, float] | None:
    """The profile's durations file as the cluster holds it; None when it has none yet."""
    path = target.profile.durations
    if not path:
        return None
    shell = getattr(target, "shell", None)
    try:
        if shell is not None:
            out = shell.run(["cat", path], check=False)
            if out.returncode != 0:
                notes.append(f"no durations in {path} yet: shards split by test count")
                return None
            text = out.stdout
        else:
            text = Path(path).read_text(encoding="utf-8")
        return checked(json.loads(text), path)
    except FileNotFoundError:
        notes.append(f"no durations in {path} here: shards split by test count")
        return None
    except CommandFailed as exc:  # the cluster did not answer: no job was submitted
        raise TargetError(f"cannot read the durations file {path} on the target: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"profile durations = {path!r} is not JSON: {exc}") from None
    except (DurationsError, OSError) as exc:
        raise ValueError(f"profile durations = {path!r}: {exc}") from None


def _expected(
    pytest_args: Sequence[str],
    durations: dict[str, float] | None,
    n: int,
    cwd: Path | None,
    notes: list[str],
) -> list[list[str]] | None:
    """Each shard's node ids, from a collection here split as the jobs will split it."""
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    argv += ["--rankgate-mode=pool", *pytest_args]
    try:
        done = finish(argv, cwd=cwd, timeout=COLLECT_TIMEOUT_S)
    except CommandFailed as exc:
        notes.append(f"could not collect the tests here ({exc}): a lost shard's tests are unknown")
        return None
    listed = done.stdout.split("\n\n")[0].splitlines()  # the ids, before the summary
    ids = [line for line in listed if "::" in line]
    if done.returncode not in (0, 5) or not ids:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        notes.append(f"collecting here gave no tests (exit {done.returncode}): {tail}")
        return None
    plan = split(ids, durations or {}, n)
    return [[ids[i] for i in plan.members(k)] for k in range(1, n + 1)]


def _merged_folder(
    results: list[DispatchResult], local_dir: Path | None, stage: str
) -> Path | None:
    """A local folder for the merged verdict: beside the shards' own folders."""
    if local_dir is not None:
        folder = local_dir
    else:
        fetched = [r.job_dir for r in results if r.job_dir is not None]
        if not fetched:
            return None
        folder = fetched[0].parent / f"{stage}-shards-{time.strftime('%Y%m%d-%H%M%S')}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def render_sharded(result: ShardedResult) -> str:
    """The verdict, one line per shard (its node and how it ended), then what failed."""
    verdict = "PASSED" if result.passed else "FAILED"
    n = len(result.shards)
    lines = [
        f"rankgate dispatch: {verdict} - stage {result.stage} in {n} shards, {result.wall_s:.0f} s"
    ]
    lines += result.notes
    for run, shard in zip(result.runs, result.shards, strict=True):
        lines.append(f"  shard {run.line()} ({shard.running_s:.0f} s running)")
    lines.append(result.merged.summary_line())
    lost = [t for t in result.merged.tests if t.verdict == "not run" and not t.results]
    if lost:
        lines.append(f"{len(lost)} tests not run: their shard left no results")
    for run, shard in zip(result.runs, result.shards, strict=True):
        if not shard.passed and run.index not in result.empty:
            lines += ["", f"===== shard {run.name} =====", render_report(shard)]
    if result.folder is not None:
        lines += ["", f"merged verdict: {result.folder / MERGED_NAME}"]
    return "\n".join(lines)
