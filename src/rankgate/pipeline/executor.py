"""The tiny executor: run a stage's commands, or say loudly why it was skipped.

``run_stage`` returns one :class:`Outcome`; ``run_gate`` runs the gate's own commands
and every included stage, each step getting nothing from the last but the verdict
table at the end. nox sessions (noxfile.py) and ``rankgate run`` both call these.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rankgate.dispatch.profile import profile_problem
from rankgate.pipeline import changes, side_by_side, stages
from rankgate.pipeline.probe import Machine, module_missing
from rankgate.pipeline.stages import Command, Stage
from rankgate.proc import command
from rankgate.proc.progress import Progress
from rankgate.report import runinfo, tracing

Status = Literal["passed", "failed", "skipped"]
NO_TESTS = 5  # pytest's exit code when the marker expression selects nothing
_REPORT_LOCK = threading.Lock()
FAILING_SHOWN = 10
"""The table names at most this many failed tests of a stage."""
SLOW_STAGE_LEFT_OUT = "slow stage, left out of the quick gate (--full runs it)"
SLOW_TESTS_LEFT_OUT = "quick: tests marked slow left out (--full runs them)"


@dataclass(kw_only=True, slots=True)
class Options:
    """How to run stages; nox posargs and ``rankgate run`` options both end up here."""

    out_dir: Path = Path("out")
    """Where products go (JUnit under junit/, benchmark JSON under bench/, gate.json)."""
    profile: str = ""
    """Site profile (TOML) for ``rankgate dispatch``: gpu and hpc run remotely with it."""
    pytest_args: tuple[str, ...] = ()
    """Extra pytest arguments (paths, -k, -x, -n ...), given to every pytest command."""
    strict: bool = False
    """The gate fails on a skipped stage too, as the release gate does; a stage whose
    optional tool (actionlint) is absent is skipped, not passed. A stage the change does
    not affect (``changed_since``) is never a failure."""
    changed_since: str = ""
    """Run only the stages a change since this git ref touches (rankgate.pipeline.changes)."""
    repo: Path = Path(".")
    """The repository ``changed_since`` is computed in."""
    only: tuple[str, ...] = ()
    """The gate runs only these of its stages (in pipeline order); () = all of them."""
    quick: bool = False
    """Leave out what is slow: tests marked ``slow`` (each starts launchers, Ray, a
    scheduler or pytest runs of its own) and slow stages (hpc, container), each named in
    the table. ``nox -s gate`` is quick unless ``--full``; a stage's session and
    ``rankgate run`` run in full unless ``--quick``."""

    @classmethod
    def from_args(cls, args: list[str], *, quick: bool = False) -> Options:
        """``[--profile P] [--out DIR] [--strict] [--quick | --full] [--changed-since REF]
        [--only S,S] [pytest args...]``; ``quick``: the default when neither is given."""
        options, rest = cls(quick=quick), list(args)
        flags = ("--profile", "--out", "--strict", "--quick", "--full", "--changed-since", "--only")
        tiers = [flag for flag in rest if flag in ("--quick", "--full")]
        if len(set(tiers)) > 1:
            raise SystemExit("--quick and --full contradict each other: give one of them")
        while rest and rest[0] in flags:
            flag = rest.pop(0)
            if flag == "--strict":
                options.strict = True
                continue
            if flag in ("--quick", "--full"):
                options.quick = flag == "--quick"
                continue
            if not rest:
                raise SystemExit(f"{flag} needs a value, e.g. nox -s gpu -- {flag} site.toml")
            value = rest.pop(0)
            if flag == "--profile":
                options.profile = _readable_profile(value)
            elif flag == "--changed-since":
                options.changed_since = value
            elif flag == "--only":
                options.only = gate_stages(value)
            else:
                options.out_dir = Path(value)
        options.pytest_args = tuple(rest)
        return options


def _readable_profile(spec: str) -> str:
    """``spec`` when it names a valid site profile; a usage error now otherwise, not when
    the first stage that dispatches starts (after the local ones, minutes later)."""
    problem = profile_problem(spec)
    if problem:
        raise SystemExit(problem)
    return spec


def gate_stages(names: str) -> tuple[str, ...]:
    """``"lint,unit"`` -> the gate's stages named there, in pipeline order; a name the
    gate does not run is a usage error naming it and the valid ones."""
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    valid = stages.get("gate").includes
    unknown = [name for name in wanted if name not in valid]
    if unknown or not wanted:
        problem = f"unknown stage {', '.join(unknown)}" if unknown else "no stage"
        raise SystemExit(f"--only {names!r}: {problem}; the gate's stages are {','.join(valid)}")
    return tuple(name for name in valid if name in wanted)


@dataclass(kw_only=True, slots=True)
class Outcome:
    """What happened to one stage (or one of the gate's own steps, e.g. env-check)."""

    stage: str
    status: Status
    reason: str = ""
    """Why it failed or was skipped; for a pass, what it could not check (a note)."""
    seconds: float = 0.0
    products: tuple[str, ...] = ()
    """Product files that exist after the run."""
    selected: str = ""
    """With ``--changed-since``: why the change made it run (or, skipped, why not)."""
    not_affected: bool = False
    """Skipped because the change does not touch it: never blocks a gate."""
    tests: dict[str, int] = field(default_factory=dict)
    """Its tests by outcome (passed ... xfailed, xpassed), from its JUnit; {} without one."""
    failing: list[str] = field(default_factory=list)
    """Its failed tests, ``id — message[: root-cause rank's error]``, from its JUnit: the
    table names them, so the last lines of a long log say what failed."""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def run_stage(
    stage: Stage,
    options: Options,
    machine: Machine | None = None,
    decision: changes.Decision | None = None,
    log: Path | None = None,
    *,
    in_gate: bool = False,
) -> Outcome:
    """Run one stage here or dispatch it; a stage the machine cannot run is skipped, loudly.

    With ``options.changed_since`` (or a ``decision`` already made) a stage the change
    does not touch is skipped, saying why. Outside a gate (``in_gate``) it is a run of
    its own: out/run.json describes it (:mod:`rankgate.report.runinfo`). ``log``: the
    commands' output goes there, not to the terminal (a stage run beside another).
    """
    if stage.includes:
        raise ValueError(f"{stage.name} runs other stages: use run_gate()")
    if decision is None and options.changed_since:
        decision = _plan(options, [stage]).decision(stage.name)
    if decision is not None and not decision.run:
        outcome = Outcome(
            stage=stage.name, status="skipped", reason=decision.reason,
            selected=decision.reason, not_affected=True,
        )  # fmt: skip
        record(outcome, options, log)
        return _announce(outcome, log)
    if not in_gate:
        runinfo.begin(options.out_dir, planned=[stage.name])
    # Marked running until its outcome replaces the mark: a killed run reads incomplete.
    runinfo.stage_started(options.out_dir, stage.name, stage.products)
    with tracing.span(f"stage {stage.name}", {"rankgate.stage": stage.name}) as trace_env:
        outcome = _run_selected(stage, options, machine or Machine(), trace_env, log)
        tracing.mark(outcome.status, **{"rankgate.reason": outcome.reason})
    tracing.flush()
    if decision is not None:
        outcome.selected = decision.reason
    record(outcome, options, log)
    return outcome


def record(outcome: Outcome, options: Options, log: Path | None = None) -> None:
    """Keep the outcome (stages/<name>.json) and refresh out/report.html and summary.md
    (``log``: a background stage's, where the line saying so goes)."""
    from rankgate.report.cli import write_quietly
    from rankgate.report.summary import stage_counts, stage_failures

    junit = options.out_dir / "junit" / f"{outcome.stage}.xml"
    outcome.tests = outcome.tests or stage_counts(junit)
    if outcome.status == "failed" and not outcome.failing:
        outcome.failing = stage_failures(junit)
    folder = options.out_dir / "stages"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{outcome.stage}.json").write_text(json.dumps(outcome.to_json(), indent=2) + "\n")
    with _REPORT_LOCK:  # background stages finish at any time
        command.say(f"rankgate: {write_quietly(options.out_dir)}", log)


def _run_selected(
    stage: Stage,
    options: Options,
    machine: Machine,
    trace_env: dict[str, str],
    log: Path | None = None,
) -> Outcome:
    start = time.monotonic()
    if options.quick and stage.slow:
        left_out = Outcome(stage=stage.name, status="skipped", reason=SLOW_STAGE_LEFT_OUT)
        return _announce(left_out, log)
    if options.profile and stage.dispatchable:
        steps = [_dispatch_command(stage, options)]
    else:
        blocked = [why for need in stage.needs if (why := machine.missing(need))]
        if blocked:
            if stage.dispatchable:
                blocked.append(f"or dispatch it: nox -s {stage.name} -- --profile SITE.toml")
            skipped = Outcome(stage=stage.name, status="skipped", reason="; ".join(blocked))
            return _announce(skipped, log)
        steps = list(stage.commands)
    status, notes, tool_absent = "skipped", [], False
    for step in steps:
        step_status, note = _run_command(step, stage, options, trace_env, log)
        if note:
            notes.append(note)
        if step_status == "failed":
            status = "failed"
            break
        if step_status == "passed":
            status = "passed"
        elif step.optional:
            tool_absent = True
    if status == "passed" and tool_absent and options.strict:
        # Strict (CI, the release gate): a check that did not run is not a pass.
        status = "skipped"
    products = tuple(p for p in stage.products if (options.out_dir / p).exists())
    seconds = time.monotonic() - start
    outcome = Outcome(
        stage=stage.name, status=status, reason="; ".join(notes), seconds=seconds, products=products
    )
    return _announce(outcome, log)


def run_gate(
    options: Options, machine: Machine | None = None, include: tuple[str, ...] | None = None
) -> list[Outcome]:
    """The gate's own commands (env-check), then each included stage; prints the table."""
    with tracing.span("gate", {"rankgate.stage": "gate"}):
        outcomes = _run_gate(options, machine, include)
        tracing.mark("failed" if any(o.status == "failed" for o in outcomes) else "passed")
    tracing.flush()
    return outcomes


def _run_gate(
    options: Options, machine: Machine | None, include: tuple[str, ...] | None
) -> list[Outcome]:
    gate = stages.get("gate")
    if include is None:
        include = options.only or gate.includes
    chosen = [stages.get(name) for name in include]
    plan = _plan(options, chosen) if options.changed_since else None
    if plan is not None:
        print(plan.render(), file=sys.stderr, flush=True)
    planned = [step.name for step in gate.commands] + [stage.name for stage in chosen]
    runinfo.begin(options.out_dir, planned=planned, gate=True)
    progress = Progress(total=len(gate.commands) + len(chosen), what="gate")
    outcomes = gate_checks(options, progress)
    machine = machine or Machine()
    numbered = list(enumerate(chosen, start=len(outcomes) + 1))

    def decide(stage: Stage) -> changes.Decision | None:
        return plan.decision(stage.name) if plan is not None else None

    # Stages that mostly wait (on a scheduler, on an image build) start first, in the
    # background, and the others run meanwhile: the gate takes the longer of the two.
    beside = [(i, stage) for i, stage in numbered if stage.beside] if len(chosen) > 1 else []
    background = side_by_side.start(
        beside,
        lambda stage, log: run_stage(stage, options, machine, decide(stage), log, in_gate=True),
        options.out_dir,
    )
    by_name: dict[str, Outcome] = {}
    # Leaving the block early (Ctrl-C, SIGTERM between two commands, the gate's own
    # error) stops the background stages: nothing runs on without the gate.
    with background, command.signals_raise_ended():
        for i, stage in numbered:
            if stage.name in background.names:
                continue
            decision = decide(stage)
            detail = decision.reason if decision else ""
            with progress.step(i, stage.name, detail, spinner=False):
                by_name[stage.name] = run_stage(stage, options, machine, decision, in_gate=True)
            progress.done(i, by_name[stage.name].status, by_name[stage.name].seconds)
        by_name.update(background.wait(progress))
    outcomes += [by_name[stage.name] for stage in chosen]
    options.out_dir.mkdir(parents=True, exist_ok=True)
    (options.out_dir / "gate.json").write_text(
        json.dumps([o.to_json() for o in outcomes], indent=2) + "\n"
    )
    print(summary_table(outcomes), flush=True)
    return outcomes


def gate_checks(options: Options, progress: Progress | None = None) -> list[Outcome]:
    """The gate's own commands (env-check), one outcome each."""
    gate = stages.get("gate")
    progress = progress or Progress(total=len(gate.commands), what="gate")
    outcomes = []
    for i, step in enumerate(gate.commands, start=1):
        start = time.monotonic()
        runinfo.stage_started(options.out_dir, step.name)
        with progress.step(i, step.name, spinner=False), tracing.span(step.name) as trace_env:
            status, note = _run_command(step, gate, options, trace_env)
            tracing.mark(status)
        seconds = time.monotonic() - start
        progress.done(i, status, seconds)
        outcome = _announce(Outcome(stage=step.name, status=status, reason=note, seconds=seconds))
        record(outcome, options)
        outcomes.append(outcome)
    return outcomes


def verdict(outcomes: list[Outcome], *, allow_skipped: bool) -> list[str]:
    """Why these outcomes do not pass a gate (empty list: they do).

    A failure always blocks; a skip blocks unless ``allow_skipped`` (the local gate
    allows skips, the release gate and ``--strict`` do not).
    """
    blockers = [f"{o.stage} failed: {o.reason}" for o in outcomes if o.status == "failed"]
    if not allow_skipped:
        blockers += [
            f"{o.stage} skipped: {o.reason}"
            for o in outcomes
            if o.status == "skipped" and not o.not_affected
        ]
    return blockers


def summary_table(outcomes: list[Outcome]) -> str:
    """Plain-text table: one row per stage; failed and skipped rows in capitals."""
    counts = {s: sum(o.status == s for o in outcomes) for s in ("passed", "failed", "skipped")}
    width = max([len(o.stage) for o in outcomes] + [5])
    lines = [
        "",
        f"{'stage':<{width}}  {'result':<7}  {'time':>7}  reason / note",
        f"{'-' * width}  {'-' * 7}  {'-' * 7}  {'-' * 40}",
    ]
    for o in outcomes:
        shown = o.status if o.status == "passed" else o.status.upper()
        note = o.reason
        if o.selected and o.selected != o.reason:
            note = "; ".join(filter(None, (o.reason, f"ran: {o.selected}")))
        lines.append(f"{o.stage:<{width}}  {shown:<7}  {o.seconds:6.1f}s  {note}".rstrip())
        if o.status == "failed" and o.tests and not o.failing:
            # pytest failed after its tests passed: a session-level check (leftovers, a
            # plugin's own verdict) or its exit; its output's last lines say which.
            lines.append(
                f"{'':<{width}}  ✗ no test failed ({_counted(o.tests)}): the "
                "session itself failed, its output's last lines say why"
            )
        shown_tests = o.failing[:FAILING_SHOWN]
        lines += [f"{'':<{width}}  ✗ {test}" for test in shown_tests]
        if len(o.failing) > len(shown_tests):
            more = len(o.failing) - len(shown_tests)
            lines.append(f"{'':<{width}}  ✗ and {more} more (out/report.html has them all)")
    lines.append(
        f"gate — {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['skipped']} skipped (stages)"
    )
    return "\n".join(lines)


def _counted(tests: dict[str, int]) -> str:
    return ", ".join(f"{n} {outcome}" for outcome, n in tests.items() if n and outcome != "tests")


def _plan(options: Options, chosen: list[Stage]) -> changes.Plan:
    try:
        return changes.plan(options.changed_since, options.repo, chosen)
    except changes.ChangesError as exc:
        raise SystemExit(f"rankgate: --changed-since: {exc}") from None


def _dispatch_command(stage: Stage, options: Options) -> Command:
    return Command(
        argv=("rankgate", "dispatch", "--profile", options.profile, "--stage", stage.name),
        label="dispatch",
        module="rankgate.pipeline.dispatch_stage",
    )


def _run_command(
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
    if argv[0] == "pytest":
        junit = options.out_dir / "junit" / f"{stage.name}.xml"
        argv += ["-m", markers] if markers else []
        argv += [f"--junitxml={junit}", *options.pytest_args]
        ok_codes = (0, NO_TESTS)
    elif step.pytest_args:
        argv += options.pytest_args
    stdout = options.out_dir / step.stdout if step.stdout else None
    env = {"RANKGATE_OUT": str(options.out_dir.resolve()), **(trace_env or {}), **dict(step.env)}
    try:
        code = command.run(argv, ok_codes=ok_codes, stdout_path=stdout, env=env, log_path=log)
    except command.CommandFailed as exc:
        return "failed", f"{step.name}: {exc.reason} ({shlex.join(exc.argv)})"
    if argv[0] == "pytest" and code == NO_TESTS:
        return "skipped", f"no tests selected by -m {markers!r}"
    if argv[0] == "pytest" and options.quick:
        return "passed", SLOW_TESTS_LEFT_OUT
    return "passed", ""


def quick_markers(markers: str) -> str:
    """A stage's marker expression without the tests marked ``slow``."""
    return f"({markers}) and not slow" if markers else "not slow"


def _announce(outcome: Outcome, log: Path | None = None) -> Outcome:
    """Say each verdict as it happens (a background stage's, into its log); a skip is
    never silent."""
    line = f"rankgate: stage {outcome.stage} {outcome.status.upper()}"
    if outcome.reason:
        line += f" — {outcome.reason}"
    command.say(line, log)
    return outcome
