"""Stages the gate runs in the background (``Stage.beside``), their outputs kept apart.

:func:`start` runs each stage in its own thread, its commands writing to
``logs/<stage>.log`` under the output dir instead of the terminal, and returns at
once: the gate runs its other stages meanwhile. :meth:`Running.wait` waits for them
and shows each log in turn, in pipeline order, under its own progress step, with its
verdict. Used as a context manager, a :class:`Running` ends them (:meth:`Running.stop`)
when its block ends early: an interrupt, a signal, a failure of the gate itself.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from rankgate.pipeline.stages import Stage
from rankgate.proc import command
from rankgate.proc.progress import Progress


class FinishedStage(Protocol):
    """What this module reads of a stage's outcome (the executor's ``Outcome``)."""

    status: str
    seconds: float


Outcome = TypeVar("Outcome", bound=FinishedStage)


class Running(Generic[Outcome]):
    """Stages started by :func:`start`, running in their own threads."""

    def __init__(
        self,
        numbered: list[tuple[int, Stage]],
        run_stage: Callable[[Stage, Path], Outcome],
        out_dir: Path,
    ) -> None:
        self.numbered = numbered
        self.logs = {stage.name: out_dir / "logs" / f"{stage.name}.log" for _, stage in numbered}
        for path in self.logs.values():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
        self._pool = ThreadPoolExecutor(max_workers=max(len(numbered), 1))
        self._futures: dict[str, Future] = {
            # a copy of the context per thread: each stage's trace span stays under the gate's
            stage.name: self._pool.submit(
                contextvars.copy_context().run, run_stage, stage, self.logs[stage.name]
            )
            for _, stage in numbered
        }
        self.stopped: list[str] = []
        """The stages a stop ended while they ran: their outcome (a command ended by
        TERM) is the stop's doing, never their failure. Noted when the first
        :func:`command.stop_all` begins, whichever thread or signal started it."""
        self._stop_began = False
        self._shown: set[str] = set()
        self._hooks = contextlib.ExitStack()

    @property
    def names(self) -> set[str]:
        return set(self._futures)

    def __enter__(self) -> Running[Outcome]:
        self._hooks.enter_context(command.before_stop_all(self._note_stopped))
        # SIGTERM in a foreground command dies from there: the stages' threads must
        # have returned (their outcomes recorded) before the page is rewritten.
        self._hooks.enter_context(command.last_words(lambda signum: self.stop()))
        return self

    def __exit__(self, kind, error, traceback) -> None:
        """Whatever ends the block early (Ctrl-C lands in the main thread, not in the
        stages' threads; SIGTERM/SIGHUP as :class:`command.EndSignal`): every stage's tree
        goes, and on a signal this process dies of it."""
        try:
            if error is None:
                return
            self.stop()
            if isinstance(error, command.EndSignal):
                command.die_of(error.args[0])
        finally:
            self._hooks.close()

    def _note_stopped(self) -> None:
        if self._stop_began:
            return
        self._stop_began = True
        self.stopped[:] = [name for name, future in self._futures.items() if not future.done()]

    def join(self) -> dict[str, Outcome]:
        """Wait for every stage to end, showing nothing (a measuring command starts then);
        name -> outcome."""
        with command.signals_raise_ended():
            return {name: future.result() for name, future in self._futures.items()}

    def wait(self, progress: Progress) -> dict[str, Outcome]:
        """Wait for every stage, then show each one's log and verdict; name -> outcome.
        Each stage is shown once: a later call returns only those not shown yet."""
        outcomes = self.join()
        self._pool.shutdown()
        shown, self._shown = self._shown, self._shown | set(outcomes)
        for i, stage in self.numbered:
            if stage.name in shown:
                continue
            outcome = outcomes[stage.name]
            log = self.logs[stage.name]
            with progress.step(
                i, stage.name, f"ran in the background; its output, from {log}:", spinner=False
            ):
                sys.stdout.write(log.read_text())
                sys.stdout.flush()
            progress.done(i, outcome.status, outcome.seconds)
        return {name: outcome for name, outcome in outcomes.items() if name not in shown}

    def stop(self) -> None:
        """End every stage's commands (TERM, then KILL) and wait for the threads to return."""
        for future in self._futures.values():
            future.cancel()  # a stage not started yet never starts
        command.stop_all()
        # again until they return: a stage between two commands may start the next one
        while futures.wait(self._futures.values(), timeout=1.0).not_done:
            command.stop_all()
        self._pool.shutdown()


def start(
    numbered: list[tuple[int, Stage]],
    run_stage: Callable[[Stage, Path], Outcome],
    out_dir: Path,
) -> Running[Outcome]:
    """Start ``run_stage(stage, log)`` for each (step number, stage); returns at once."""
    running = Running(numbered, run_stage, out_dir)
    if numbered:
        names = " and ".join(stage.name for _, stage in numbered)
        where = ", ".join(str(path) for path in running.logs.values())
        print(
            f"rankgate: gate runs {names} in the background; output: {where}",
            file=sys.stderr,
            flush=True,
        )
    return running


def run(
    numbered: list[tuple[int, Stage]],
    run_stage: Callable[[Stage, Path], Outcome],
    out_dir: Path,
    progress: Progress,
) -> dict[str, Outcome]:
    """Start the stages and wait for them: :func:`start`, then :meth:`Running.wait`."""
    with start(numbered, run_stage, out_dir) as running:
        return running.wait(progress)
