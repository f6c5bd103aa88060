"""``rankgate dispatch --profile P --stage S``: run a stage's tests on a remote target.

The stage's marker expression comes from :mod:`rankgate.pipeline.stages` (the one
stage list); the profile says where and how. Progress goes to stderr, the report to
stdout (``--json`` adds the summary as the last line). Exit status: 0 passed,
1 the tests failed, 2 bad input (profile, stage), 3 the job did not end by its own
tests (submit error, time limit, cancelled, node failure, preempted, deadline ...).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

from rankgate.cliargs import int_at_least, seconds
from rankgate.dispatch.job_result import MERGED_NAME, DispatchResult, render_report
from rankgate.dispatch.profile import Profile, ProfileError, resolve_profile
from rankgate.dispatch.run import describe_stage, run_sharded_stage, run_stage, wait_policy
from rankgate.dispatch.sharded_run import ShardedResult, render_sharded
from rankgate.dispatch.target import TargetError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--profile",
        required=True,
        help="site profile: a .toml path, or NAME looked up as NAME.toml in $RANKGATE_PROFILES "
        "(folders separated by ':') and ./profiles",
    )
    parser.add_argument(
        "--stage",
        help="pipeline stage whose tests run on the target, e.g. gpu or hpc (required, "
        "unless --canary)",
    )
    parser.add_argument(
        "--canary",
        action="store_true",
        help="interLink profiles: submit pods meant to succeed, fail and time out (the "
        "run timeout, default 60 s) and check each outcome; exit 0 when all three match",
    )
    parser.add_argument(
        "--markers",
        help="pytest marker expression to run instead of the stage's (default: the stage's)",
    )
    parser.add_argument(
        "--shards",
        type=int_at_least(1),
        default=None,
        metavar="N",
        help="split the stage's tests into N jobs by their stored times (the profile's "
        "durations) and merge their results into one verdict (default: the profile's shards)",
    )
    _add_wait_arguments(parser)
    parser.add_argument(
        "--out", type=Path, default=None,
        help="local folder for the fetched results of a remote target (default: a new "
        "temporary folder, named in the summary)",
    )
    parser.add_argument(
        "--junit",
        type=Path,
        default=None,
        help="write the merged JUnit file here (default: $RANKGATE_OUT/junit/STAGE.xml "
        "when RANKGATE_OUT is set)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print what would be submitted (sbatch script or pod) and exit",
    )
    parser.add_argument("--json", action="store_true", help="print the summary JSON last")
    parser.add_argument(
        "pytest_args",
        nargs=argparse.REMAINDER,
        help="after --: extra pytest arguments (paths, -k, -x ...)",
    )


def _add_wait_arguments(parser: argparse.ArgumentParser) -> None:
    """How long to wait and how often to look (rankgate.dispatch.run.wait_policy)."""
    parser.add_argument(
        "--deadline",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help="cancel the job when it has not ended after this long (default: no deadline)",
    )
    parser.add_argument(
        "--queue-timeout",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help="cancel the job when it has waited in the queue this long "
        "(default: the profile's queue_timeout, interlink.queue_timeout for interLink)",
    )
    parser.add_argument(
        "--run-timeout",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help="cancel the job when it has run this long (interLink: default from the profile)",
    )
    parser.add_argument(
        "--poll",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help="seconds between status checks (default: 2 for SLURM, the "
        "profile's interlink.poll_interval for interLink)",
    )


def stage_selection(stage: str) -> tuple[str, bool]:
    """(marker expression of its remote run, needs GPUs) of a dispatchable stage."""
    from rankgate.pipeline import stages

    try:
        found = stages.get(stage)
    except KeyError as exc:
        raise ProfileError(str(exc.args[0])) from None
    if not found.dispatchable:
        able = [s.name for s in stages.all_stages() if s.dispatchable]
        raise ProfileError(f"stage {stage!r} runs only locally; dispatchable stages: {able}")
    return found.dispatch_markers, "gpus" in found.needs


def _progress(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    try:
        profile = resolve_profile(args.profile)
        if args.shards is not None:
            profile = replace(profile, shards=args.shards)
        if args.canary:
            return _canary(profile, args)
        result = _dispatch(profile, args, _pytest_args(profile, args))
    except (ProfileError, ValueError) as exc:  # bad input: profile, stage, paths
        print(f"rankgate dispatch: error: {exc}", file=sys.stderr)
        return 2
    except TargetError as exc:  # no API, no token file, no kubernetes package
        print(f"rankgate dispatch: {exc}", file=sys.stderr)
        return 3
    if result is None:  # --dry-run
        return 0
    print(render_sharded(result) if isinstance(result, ShardedResult) else render_report(result))
    _copy_merged_junit(result, args)
    if args.json:
        print(json.dumps(result.to_json()))
    return result.exit_status


def _pytest_args(profile: Profile, args: argparse.Namespace) -> list[str]:
    """``-m MARKERS`` of the stage (or --markers) plus the extra arguments after ``--``."""
    if not args.stage:
        raise ProfileError("pass --stage STAGE (or --canary for an interLink profile)")
    markers, needs_gpus = stage_selection(args.stage)
    if needs_gpus:
        profile.require_gpus(f"stage {args.stage!r}")
    markers = args.markers or markers
    extra = [a for a in args.pytest_args if a != "--"]
    return [*(["-m", markers] if markers else []), *extra]


def _canary(profile: Profile, args: argparse.Namespace) -> int:
    from rankgate.dispatch.interlink.canary import run_canary

    checks = run_canary(
        profile, run_timeout_s=args.run_timeout or 60.0, poll_s=args.poll, progress=_progress
    )
    for check in checks:
        verdict = "ok  " if check.ok else "FAIL"
        print(
            f"{verdict} canary {check.name}: expected {check.expected.value}, "
            f"got {check.got.value} ({check.detail})"
        )
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "name": c.name,
                        "expected": c.expected.value,
                        "got": c.got.value,
                        "ok": c.ok,
                        "detail": c.detail,
                    }
                    for c in checks
                ]
            )
        )
    return 0 if all(check.ok for check in checks) else 1


def _copy_merged_junit(result: DispatchResult | ShardedResult, args: argparse.Namespace) -> None:
    """Put the merged JUnit file where the pipeline expects the stage's product."""
    target = args.junit
    if target is None and os.environ.get("RANKGATE_OUT"):
        target = Path(os.environ["RANKGATE_OUT"]) / "junit" / f"{args.stage}.xml"
    source = result.job_dir / MERGED_NAME if result.job_dir else None
    if target is None or source is None or not source.is_file():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    print(f"merged JUnit: {target}", file=sys.stderr)


def _dispatch(profile: Profile, args: argparse.Namespace, pytest_args: list[str]):
    if args.dry_run:
        if profile.shards > 1:
            durations = (
                " --rankgate-durations=<job folder>/durations.in.json" if profile.durations else ""
            )
            print(
                f"# {profile.shards} jobs like this one; job K adds "
                f"--rankgate-shard=K/{profile.shards}{durations}"
            )
        print(describe_stage(profile, stage=args.stage, pytest_args=pytest_args), end="")
        return None
    wait = wait_policy(
        profile,
        poll_s=args.poll,
        deadline_s=args.deadline,
        queue_timeout_s=args.queue_timeout,
        run_timeout_s=args.run_timeout,
    )
    run = run_sharded_stage if profile.shards > 1 else run_stage
    return run(
        profile,
        stage=args.stage,
        pytest_args=pytest_args,
        wait=wait,
        progress=_progress,
        local_dir=args.out,
    )
