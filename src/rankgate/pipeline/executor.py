"""The gate, as a tuple of steps: plan, checks, stages, gate.json, table.

:func:`run_gate` runs :data:`GATE_STEPS` in turn over one :class:`GateRun`, each step
reading what the ones before it left there (nox's workflow, as plain functions). A
stage alone is :func:`~rankgate.pipeline.stage_commands.run_stage`; :func:`verdict`
says what blocks a gate. nox sessions (noxfile.py) and ``rankgate run`` call these.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rankgate.pipeline import changes, side_by_side, stages
from rankgate.pipeline.options import Options
from rankgate.pipeline.probe import Machine
from rankgate.pipeline.stage_commands import announce, change_plan, run_command, run_stage
from rankgate.pipeline.stage_outcome import Outcome, record, refresh_report
from rankgate.pipeline.stages import Stage
from rankgate.pipeline.stopped import rewrite_on_stop
from rankgate.pipeline.table import summary_table
from rankgate.proc import command
from rankgate.proc.progress import Progress
from rankgate.report import runinfo, tracing

__all__ = [
    "GATE_STEPS", "GateRun", "Options", "Outcome", "gate_checks", "record", "run_gate",
    "run_stage", "summary_table", "verdict",
]  # fmt: skip


@dataclass(kw_only=True, slots=True)
class GateRun:
    """One run of the gate, as its steps fill it in."""

    options: Options
    machine: Machine | None
    include: tuple[str, ...] | None
    """The stages to run (None: ``options.only``, else all of the gate's)."""
    chosen: list[Stage] = field(default_factory=list)
    plan: changes.Plan | None = None
    """With ``--changed-since``: which stages the change touches."""
    progress: Progress | None = None
    outcomes: list[Outcome] = field(default_factory=list)
    stopped_beside: list[str] = field(default_factory=list)
    """Background stages the gate's stop ended while they ran (they read INCOMPLETE)."""


def plan(run: GateRun) -> None:
    """Pick the stages, say which the change touches, and start out/run.json."""
    gate = stages.get("gate")
    include = run.include if run.include is not None else run.options.only or gate.includes
    run.chosen = [stages.get(name) for name in include]
    if run.options.changed_since:
        run.plan = change_plan(run.options, run.chosen)
        print(run.plan.render(), file=sys.stderr, flush=True)
    planned = [step.name for step in gate.commands] + [stage.name for stage in run.chosen]
    runinfo.begin(run.options.out_dir, planned=planned, gate=True)
    run.progress = Progress(total=len(gate.commands) + len(run.chosen), what="gate")


def checks(run: GateRun) -> None:
    """The gate's own commands (env-check)."""
    run.outcomes += gate_checks(run.options, run.progress)


def run_stages(run: GateRun) -> None:
    """Every chosen stage; those that mostly wait (on a scheduler, on an image build, on
    the launches their tests start) start first, in the background, and the others run
    meanwhile: the gate takes the longer of the two. A command that measures waits for
    the background to end (the commands of its stage before it need not). The report is
    refreshed as each one ends."""
    options, progress = run.options, run.progress
    machine = run.machine or Machine()
    numbered = list(enumerate(run.chosen, start=len(run.outcomes) + 1))

    def stage_run(
        stage: Stage, log: Path | None = None, before_measuring: Callable[[], object] | None = None
    ) -> Outcome:
        decision = run.plan.decision(stage.name) if run.plan is not None else None
        outcome = run_stage(
            stage, options, machine, decision, log, in_gate=True,
            before_measuring=before_measuring,
        )  # fmt: skip
        refresh_report(options.out_dir, log)
        return outcome

    beside = [(i, stage) for i, stage in numbered if stage.beside] if len(run.chosen) > 1 else []
    background = side_by_side.start(beside, stage_run, options.out_dir)
    run.stopped_beside = background.stopped  # the same list: stop() fills it in
    by_name: dict[str, Outcome] = {}
    # Leaving the block early (Ctrl-C, SIGTERM between two commands, the gate's own
    # error) stops the background stages: nothing runs on without the gate.
    with background, command.signals_raise_ended():
        for i, stage in numbered:
            if stage.name in background.names:
                continue
            decision = run.plan.decision(stage.name) if run.plan is not None else None
            with progress.step(i, stage.name, decision.reason if decision else "", spinner=False):
                # its measuring command waits there for the background (shown after it)
                by_name[stage.name] = stage_run(stage, before_measuring=background.join)
            progress.done(i, by_name[stage.name].status, by_name[stage.name].seconds)
        by_name.update(background.wait(progress))
    run.outcomes += [by_name[stage.name] for stage in run.chosen]


def gate_json(run: GateRun) -> None:
    """Every outcome, in order, as out/gate.json."""
    run.options.out_dir.mkdir(parents=True, exist_ok=True)
    (run.options.out_dir / "gate.json").write_text(
        json.dumps([o.to_json() for o in run.outcomes], indent=2) + "\n"
    )


def table(run: GateRun) -> None:
    """The verdict table, on stdout."""
    print(summary_table(run.outcomes), flush=True)


GATE_STEPS: tuple[Callable[[GateRun], None], ...] = (plan, checks, run_stages, gate_json, table)


def run_gate(
    options: Options, machine: Machine | None = None, include: tuple[str, ...] | None = None
) -> list[Outcome]:
    """The gate's own commands (env-check), then each included stage; prints the table.
    Stopped by a signal, it writes its table, gate.json and report on the way out
    (:mod:`rankgate.pipeline.stopped`)."""
    run = GateRun(options=options, machine=machine, include=include)
    gate = stages.get("gate")

    def planned() -> list[str]:
        return [step.name for step in gate.commands] + [stage.name for stage in run.chosen]

    with tracing.span("gate", {"rankgate.stage": "gate"}):
        # Stopped (Ctrl-C, SIGTERM), the gate still leaves its table, gate.json and a page
        # saying INCOMPLETE, never the page written when the running stage started.
        # A background stage the stop ended has recorded its command's exit (-15): it
        # reads INCOMPLETE too, as the foreground one does.
        stopped_beside = lambda: run.stopped_beside  # noqa: E731
        with rewrite_on_stop(options, planned, gate=True, also_stopped=stopped_beside):
            for step in GATE_STEPS:
                step(run)
        tracing.mark("failed" if any(o.status == "failed" for o in run.outcomes) else "passed")
    tracing.flush()
    return run.outcomes


def gate_checks(options: Options, progress: Progress | None = None) -> list[Outcome]:
    """The gate's own commands (env-check), one outcome each, the report refreshed after each."""
    gate = stages.get("gate")
    progress = progress or Progress(total=len(gate.commands), what="gate")
    outcomes = []
    for i, step in enumerate(gate.commands, start=1):
        start = time.monotonic()
        runinfo.stage_started(options.out_dir, step.name)
        with progress.step(i, step.name, spinner=False), tracing.span(step.name) as trace_env:
            status, note = run_command(step, gate, options, trace_env)
            tracing.mark(status)
        seconds = time.monotonic() - start
        progress.done(i, status, seconds)
        outcome = announce(Outcome(stage=step.name, status=status, reason=note, seconds=seconds))
        record(outcome, options)
        refresh_report(options.out_dir)
        outcomes.append(outcome)
    return outcomes


def verdict(outcomes: list[Outcome], *, allow_skipped: bool) -> list[str]:
    """Why these outcomes do not pass a gate (empty list: they do).

    A failure and an incomplete stage (it ran no test, or was stopped) always block; a
    skip blocks unless ``allow_skipped`` (the local gate allows skips, the release gate
    and ``--strict`` do not), or the change does not touch it, or it is empty on purpose.
    """
    blocking = ("failed", "incomplete")
    blockers = [f"{o.stage} {o.status}: {o.reason}" for o in outcomes if o.status in blocking]
    if not allow_skipped:
        blockers += [
            f"{o.stage} skipped: {o.reason}"
            for o in outcomes
            if o.status == "skipped" and not o.not_affected and not o.empty_on_purpose
        ]
    return blockers
