"""Run a pipeline stage's tests on the profile's target: the package's entry points.

- :func:`target_for`: the :class:`~rankgate.dispatch.target.Target` a profile names
  (the only place that maps ``profile.target`` to code).
- :func:`wait_policy`: the :class:`~rankgate.dispatch.watch.WaitPolicy` of a dispatch,
  built once: the target's defaults (its poll interval, the profile's queue and run
  deadlines), then what the command line says.
- :func:`run_stage`: submit, wait, fetch and merge (:func:`~rankgate.dispatch.target.run_job`).
- :func:`run_sharded_stage`: the same as ``profile.shards`` jobs, one shard of the tests
  each, merged into one verdict (:mod:`~rankgate.dispatch.sharded_run`).
- :func:`describe_stage`: what ``--dry-run`` prints (the sbatch script, the pod).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from rankgate.dispatch.job_result import DispatchResult
from rankgate.dispatch.profile import Profile
from rankgate.dispatch.sharded_run import ShardedResult, run_shards
from rankgate.dispatch.target import Target, run_job
from rankgate.dispatch.watch import Progress, WaitPolicy


def _target_class(profile: Profile) -> type:
    if profile.target in ("slurm", "slurm-ssh"):
        from rankgate.dispatch.slurm import SlurmTarget

        return SlurmTarget
    from rankgate.dispatch.interlink.target import InterlinkTarget

    return InterlinkTarget


def target_for(profile: Profile) -> Target:
    """The target of ``profile`` (SLURM here or over ssh, interLink by REST or Kubernetes)."""
    return _target_class(profile)(profile)


def wait_policy(
    profile: Profile,
    *,
    poll_s: float | None = None,
    deadline_s: float | None = None,
    queue_timeout_s: float | None = None,
    run_timeout_s: float | None = None,
) -> WaitPolicy:
    """The target's defaults for ``profile``, with each given (non-zero) value instead."""
    policy = _target_class(profile).default_wait(profile)
    given = {
        "poll_s": poll_s,
        "deadline_s": deadline_s,
        "queue_timeout_s": queue_timeout_s,
        "run_timeout_s": run_timeout_s,
    }
    return replace(policy, **{key: value for key, value in given.items() if value})


def run_stage(  # seven parameters: the profile, then six keywords, each with a default
    profile: Profile,
    *,
    stage: str,
    pytest_args: Sequence[str],
    wait: WaitPolicy | None = None,
    progress: Progress | None = None,
    local_dir: Path | None = None,
    target: Target | None = None,
) -> DispatchResult:
    """Dispatch ``pytest pytest_args`` as stage ``stage`` on the profile's target.

    The keywords are the stage, its arguments, and what a caller may choose: the wait
    (default :func:`wait_policy`), progress lines, where fetched results go, and the
    target itself (one with a backend of its own, in tests).
    """
    target = target or target_for(profile)
    job = target.job(stage, pytest_args)
    say = progress or (lambda line: None)
    return run_job(target, job, wait or wait_policy(profile), say=say, local=local_dir)


def run_sharded_stage(  # as run_stage, for a profile with shards > 1
    profile: Profile,
    *,
    stage: str,
    pytest_args: Sequence[str],
    wait: WaitPolicy | None = None,
    progress: Progress | None = None,
    local_dir: Path | None = None,
    target: Target | None = None,
) -> ShardedResult:
    """:func:`run_stage` as ``profile.shards`` jobs, one shard of the tests each, merged
    into one verdict (:mod:`rankgate.dispatch.sharded_run`)."""
    target = target or target_for(profile)
    workdir = Path(profile.workdir) if profile.workdir and Path(profile.workdir).is_dir() else None
    return run_shards(
        target,
        stage=stage,
        pytest_args=pytest_args,
        wait=wait or wait_policy(profile),
        say=progress or (lambda line: None),
        local_dir=local_dir,
        collect_cwd=workdir,
    )


def describe_stage(profile: Profile, *, stage: str, pytest_args: Sequence[str]) -> str:
    """What :func:`run_stage` would submit (the sbatch script, the pod as JSON)."""
    target = target_for(profile)
    return target.describe(target.job(stage, pytest_args))
