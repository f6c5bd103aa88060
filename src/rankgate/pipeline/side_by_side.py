"""Stages the gate runs at the same time (``Stage.beside``), their outputs kept apart.

Each stage runs in its own thread, its commands writing to ``logs/<stage>.log`` under
the output dir instead of the terminal; when all have ended, each log is shown in turn,
in pipeline order, under its own progress step, with its verdict.
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol, TypeVar

from rankgate.pipeline import process
from rankgate.pipeline.progress import Progress
from rankgate.pipeline.stages import Stage


class Finished(Protocol):
    """What this module reads of a stage's outcome (the executor's ``Outcome``)."""

    status: str
    seconds: float


Outcome = TypeVar("Outcome", bound=Finished)


def run(
    numbered: list[tuple[int, Stage]],
    run_stage: Callable[[Stage, Path], Outcome],
    out_dir: Path,
    progress: Progress,
) -> dict[str, Outcome]:
    """Run ``run_stage(stage, log)`` for each (step number, stage) at once; name -> outcome."""
    logs = {stage.name: out_dir / "logs" / f"{stage.name}.log" for _, stage in numbered}
    for path in logs.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    names = " and ".join(stage.name for _, stage in numbered)
    where = ", ".join(str(path) for path in logs.values())
    print(f"rankgate: gate runs {names} side by side; output: {where}", file=sys.stderr, flush=True)
    with ThreadPoolExecutor(max_workers=len(numbered)) as pool:
        futures = {
            # a copy of the context per thread: each stage's trace span stays under the gate's
            stage.name: pool.submit(
                contextvars.copy_context().run, run_stage, stage, logs[stage.name]
            )
            for _, stage in numbered
        }
        try:
            with process.signals_raise_ended():
                outcomes = {name: future.result() for name, future in futures.items()}
        except process.Ended as ended:  # SIGTERM/SIGHUP: every stage's tree goes, then us
            process.stop_all()
            process.die_of(ended.args[0])
            raise
        except BaseException:  # Ctrl-C lands here, in the main thread: stop every stage
            process.stop_all()
            raise
    for i, stage in numbered:
        outcome = outcomes[stage.name]
        with progress.step(
            i, stage.name, f"ran side by side; its output, from {logs[stage.name]}:", spinner=False
        ):
            sys.stdout.write(logs[stage.name].read_text())
            sys.stdout.flush()
        progress.done(i, outcome.status, outcome.seconds)
    return outcomes
