"""One stage: run its commands here or dispatch it, or say loudly why it was skipped.

:func:`run_stage` returns one :class:`~rankgate.pipeline.stage_outcome.Outcome` and keeps it
(``stages/<name>.json``); a stage run on its own (not in a gate) also describes its run
in out/run.json and refreshes the report. :func:`run_command` runs one command of a
stage, pytest's with the stage's markers and JUnit file.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from rankgate.pipeline import changes
from rankgate.pipeline.coverage import coverage_args
from rankgate.pipeline.options import Options
from rankgate.pipeline.probe import Machine, module_missing
from rankgate.pipeline.stage_outcome import Outcome, Status, record, refresh_report
from rankgate.pipeline.stages import Command, Stage
from rankgate.pipeline.stopped import rewrite_on_stop
from rankgate.proc import command
from rankgate.report import runinfo, tracing

NO_TESTS = 5  # pytest's exit code when the marker expression selects nothing
EMPTY_ON_PURPOSE = "empty on purpose"
"""How a skip of a stage that may select no test (Stage.empty_on_purpose) starts."""
SLOW_STAGE_LEFT_OUT = "slow stage, left out of the quick gate (--full runs it)"
SLOW_TESTS_LEFT_OUT = "quick: tests marked slow left out (--full runs them)"


def run_stage(
    stage: Stage,
    options: Options,
    machine: Machine | None = None,
    decision: changes.Decision | None = None,
    log: Path | None = None,
    *,
    in_gate: bool = False,
    before_measuring: Callable[[], object] | None = None,
) -> Outcome:
    """Run one stage here or dispatch it; a stage the machine cannot run is skipped, loudly.

    With ``options.changed_since`` (or a ``decision`` already made) a stage the change
    does not touch is skipped, saying why. Outside a gate (``in_gate``) it is a run of
    its own: out/run.json describes it (:mod:`rankgate.report.runinfo`) and it refreshes
    the report; in a gate, the gate does. ``log``: the commands' output goes there, not
    to the terminal (a stage run beside another). ``before_measuring``: called before
    its first command that measures (the gate's wait for its background stages).
    """
    if stage.includes:
        raise ValueError(f"{stage.name} runs other stages: use run_gate()")
    if decision is None and options.changed_since:
        decision = change_plan(options, [stage]).decision(stage.name)
    if decision is not None and not decision.run:
        outcome = Outcome(
            stage=stage.name, status="skipped", reason=decision.reason,
            selected=decision.reason, not_affected=True,
        )  # fmt: skip
        record(outcome, options)
        if not in_gate:
            refresh_report(options.out_dir, log)
        return announce(outcome, log)
    if not in_gate:
        runinfo.begin(options.out_dir, planned=[stage.name])
    # Marked running until its outcome replaces the mark: a killed run reads incomplete.
    runinfo.stage_started(options.out_dir, stage.name, stage.products)
    # A stage run alone rewrites its page when stopped; in a gate, the gate does.
    on_stop = (
        contextlib.nullcontext()
        if in_gate
        else rewrite_on_stop(options, lambda: [stage.name], gate=False)
    )
    with on_stop, tracing.span(f"stage {stage.name}", {"rankgate.stage": stage.name}) as trace_env:
        outcome = _run_selected(
            stage, options, machine or Machine(), trace_env, log, before_measuring
        )
        tracing.mark(outcome.status, **{"rankgate.reason": outcome.reason})
    tracing.flush()
    if decision is not None:
        outcome.selected = decision.reason
    record(outcome, options)
    if not in_gate:
        refresh_report(options.out_dir, log)
    return outcome


def _run_selected(
    stage: Stage,
    options: Options,
    machine: Machine,
    trace_env: dict[str, str],
    log: Path | None = None,
    before_measuring: Callable[[], object] | None = None,
) -> Outcome:
    start = time.monotonic()
    if options.quick and stage.slow:
        left_out = Outcome(stage=stage.name, status="skipped", reason=SLOW_STAGE_LEFT_OUT)
        return announce(left_out, log)
    if options.profile and stage.dispatchable:
        steps = [_dispatch_command(stage, options)]
    else:
        blocked = [why for need in stage.needs if (why := machine.missing(need))]
        if blocked:
            if stage.dispatchable:
                blocked.append(f"or dispatch it: nox -s {stage.name} -- --profile SITE.toml")
            skipped = Outcome(stage=stage.name, status="skipped", reason="; ".join(blocked))
            return announce(skipped, log)
        steps = list(stage.commands)
    statuses, notes, tool_absent = [], [], False
    for step in steps:
        if step.measures and before_measuring is not None:
            before_measuring()
            before_measuring = None
        step_status, note = run_command(step, stage, options, trace_env, log)
        statuses.append(step_status)
        if note:
            notes.append(note)
        if step_status == "failed":
            break
        if step_status == "skipped" and step.optional:
            tool_absent = True
    # The worst of its commands: a failure, then a selection that ran no test (never a
    # pass, whatever the other commands did), then a pass; skipped when none ran.
    status: Status = next(
        (s for s in ("failed", "incomplete", "passed") if s in statuses), "skipped"
    )
    if status == "passed" and tool_absent and options.strict:
        # Strict (CI, the release gate): a check that did not run is not a pass.
        status = "skipped"
    products = tuple(p for p in stage.products if (options.out_dir / p).exists())
    seconds = time.monotonic() - start
    outcome = Outcome(
        stage=stage.name, status=status, reason="; ".join(notes), seconds=seconds,
        products=products,
        empty_on_purpose=status == "skipped" and any(n.startswith(EMPTY_ON_PURPOSE) for n in notes),
    )  # fmt: skip
    return announce(outcome, log)


def change_plan(options: Options, chosen: list[Stage]) -> changes.Plan:
    """Which of ``chosen`` the change since ``options.changed_since`` touches."""
    try:
        return changes.plan(options.changed_since, options.repo, chosen)
    except changes.ChangesError as exc:
        raise SystemExit(f"rankgate: --changed-since: {exc}") from None


def _dispatch_command(stage: Stage, options: Options) -> Command:
    shards = ("--shards", str(options.shards)) if options.shards else ()
    return Command(
        argv=("rankgate", "dispatch", "--profile", options.profile, "--stage", stage.name, *shards),
        label="dispatch",
        module="rankgate.pipeline.dispatch_stage",
    )


def run_command(
    step: Command,
    stage: Stage,
    options: Options,
    trace_env: dict[str, str] | None = None,
    log: Path | None = None,
) -> tuple[Status, str]:
    """Run one command of ``stage``: (passed|failed|skipped, note for the table)."""
    if step.module and (why := module_missing(step.module)):
        return "skipped", f"{step.name}: {why}"
    argv = list(step.argv)
    if step.optional and shutil.which(argv[0]) is None:
        hint = f" ({step.install})" if step.install else ""
        return "skipped", f"{step.name} not on PATH, not run{hint}"
    if step.optional_paths:
        argv = [a for a in argv if a not in step.optional_paths or Path(a).exists()]
        if not any(a in step.optional_paths for a in argv):
            return "skipped", f"{step.name}: none of {', '.join(step.optional_paths)} exist"
    ok_codes: tuple[int, ...] = (0,)
    markers = quick_markers(stage.markers) if options.quick else stage.markers
    coverage_env: dict[str, str] = {}
    if argv[0] == "pytest":
        junit = options.out_dir / "junit" / f"{stage.name}.xml"
        argv += ["-m", markers] if markers else []
        argv += [f"--junitxml={junit}", *options.pytest_args]
        argv += collect_where(stage, options.pytest_args)
        argv += coverage_args(stage.name, options, coverage_env)
        ok_codes = (0, NO_TESTS)
    elif step.pytest_args:
        argv += options.pytest_args
    stdout = options.out_dir / step.stdout if step.stdout else None
    env = {"RANKGATE_OUT": str(options.out_dir.resolve()), **(trace_env or {}), **dict(step.env)}
    env.update(coverage_env)
    try:
        code = command.run(argv, ok_codes=ok_codes, stdout_path=stdout, env=env, log_path=log)
    except command.CommandFailed as exc:
        return "failed", f"{step.name}: {exc.reason} ({shlex.join(exc.argv)})"
    if argv[0] == "pytest" and code == NO_TESTS:
        return empty_selection(stage, markers, options)
    if argv[0] == "pytest" and options.quick:
        return "passed", SLOW_TESTS_LEFT_OUT
    return "passed", ""


def collect_where(stage: Stage, pytest_args: list[str] | tuple[str, ...]) -> list[str]:
    """The stage's test paths, unless the run's pytest arguments name paths of their own
    (``nox -s unit -- tests/harness``): those choose where pytest collects."""
    if not stage.test_paths or any(Path(a.split("::", 1)[0]).exists() for a in pytest_args):
        return []
    if not all(Path(p).exists() for p in stage.test_paths):
        return []  # not run from the repository root: pytest's own testpaths decide
    return list(stage.test_paths)


def empty_selection(stage: Stage, markers: str, options: Options) -> tuple[Status, str]:
    """pytest selected no test: INCOMPLETE (a typo in a marker or a path must never read
    as a pass), or skipped when the stage says why it may be empty."""
    what = " ".join(filter(None, (f"-m {markers!r}" if markers else "", *options.pytest_args)))
    what = what or "its paths"
    if stage.empty_on_purpose:
        why = stage.empty_on_purpose
        return "skipped", f"{EMPTY_ON_PURPOSE}: {why} (no test selected by {what})"
    return "incomplete", f"ran no test: pytest selected none by {what}; check the markers and paths"


def quick_markers(markers: str) -> str:
    """A stage's marker expression without the tests marked ``slow``."""
    return f"({markers}) and not slow" if markers else "not slow"


def announce(outcome: Outcome, log: Path | None = None) -> Outcome:
    """Say each verdict as it happens (a background stage's, into its log); a skip is
    never silent."""
    line = f"rankgate: stage {outcome.stage} {outcome.status.upper()}"
    if outcome.reason:
        line += f" — {outcome.reason}"
    command.say(line, log)
    return outcome
