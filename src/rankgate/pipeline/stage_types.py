"""What a stage is: the ``Stage`` and ``Command`` records the stage list
(:mod:`rankgate.pipeline.stages`) is written in, and the words for where a stage runs and
what it needs. They check themselves as they are made; the list itself is data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Where = Literal["local", "container", "dispatch"]
"""local: this machine's Python environment. container: inside an image built from
containers/. dispatch: on a remote target through ``rankgate dispatch``."""

Need = Literal["gpus", "slurm", "container-engine"]
"""What a stage needs from the machine that runs it locally."""

WHERES: tuple[str, ...] = ("local", "container", "dispatch")
NEEDS: tuple[str, ...] = ("gpus", "slurm", "container-engine")


@dataclass(frozen=True, kw_only=True, slots=True)
class Command:
    """One command a stage runs, in order."""

    argv: tuple[str, ...]
    """The command line; ``pytest`` gets the stage's markers, JUnit file and extra args."""
    label: str = ""
    """Short name for the summary table (default: the program's name)."""
    optional: bool = False
    """A tool that may be absent: absent means a loud note, not a failure (e.g. actionlint)."""
    install: str = ""
    """How to install an optional tool; shown when it is absent."""
    module: str = ""
    """A rankgate module the command needs; absent means the command is skipped with that reason."""
    stdout: str = ""
    """Product file (under the output dir) that receives a copy of the command's stdout."""
    optional_paths: tuple[str, ...] = ()
    """Arguments that are paths: absent ones are dropped (``actionlint`` with no workflows)."""
    env: tuple[tuple[str, str], ...] = ()
    """Environment variables the command gets, as (name, value) pairs."""
    pytest_args: bool = False
    """The run's extra pytest arguments go to this command too (it runs pytest through
    nox itself, as stage latest does); a ``pytest`` command always gets them."""
    measures: bool = False
    """Its figures are compared with baselines: in a gate it starts once every stage in
    the background has ended, and nothing runs beside it (the stage's commands before it
    may run while the background ends)."""

    def __post_init__(self) -> None:
        if not self.argv:
            raise ValueError("Command.argv is empty: give at least the program name")

    @property
    def name(self) -> str:
        return self.label or self.argv[0]


@dataclass(frozen=True, kw_only=True, slots=True)
class Stage:
    """One step of the pipeline."""

    name: str
    """Stage name; also the nox session's name."""
    description: str
    """One line, shown by ``nox -l``, ``rankgate run --list`` and docs/pipeline.md's table."""
    markers: str = ""
    """pytest marker expression selecting the stage's tests ("" when it runs no pytest)."""
    test_paths: tuple[str, ...] = ()
    """Folders its pytest collects (() = the whole tree); every test its markers select
    must lie under them (tests/pipeline/test_stage_test_paths.py)."""
    remote_markers: str = ""
    """Marker expression of a dispatched run, when it differs from ``markers`` ("" = the
    same): the tests every rank of the remote job runs in place. A stage whose local
    tests drive a scheduler (hpc) sends genuine multi-rank tests to the cluster instead."""
    where: tuple[Where, ...]
    """Where the stage can run (see :data:`Where`)."""
    needs: tuple[Need, ...] = ()
    """What it needs to run locally; a machine without it skips the stage, loudly."""
    products: tuple[str, ...] = ()
    """Files it writes, relative to the output dir (``out/`` by default)."""
    commands: tuple[Command, ...] = ()
    """What it runs locally, in order."""
    includes: tuple[str, ...] = ()
    """Stages it runs after its own commands (only the gate has any)."""
    empty_on_purpose: str = ""
    """Why its pytest may select no test (e.g. "no GPU tests yet"): a run that selects
    none is then skipped, "empty on purpose: <why>". Without it, a selection that runs no
    test is INCOMPLETE and blocks the gate: a typo in a marker never passes."""
    beside: bool = False
    """The gate starts it first, in the background, and runs its other stages meanwhile:
    it waits more than it computes (on a scheduler, on an image build, on the launches its
    tests start), so it shares the cores well. Its output then goes to
    ``logs/<name>.log``, shown once the others end."""
    slow: bool = False
    """Its work takes minutes whatever it selects (a scheduler's jobs, an image build):
    the quick gate (``nox -s gate`` without ``--full``) leaves it out, saying so."""
    scheduled: bool = False
    """It runs on a schedule, in a workflow job of its own, never in the gate: its verdict
    is news about upstream releases (stage latest), not about a change."""
    paths: tuple[str, ...] = ()
    """Files the stage depends on, as globs relative to the repository root (``*`` stays
    within a folder, ``**`` crosses folders, ``dir/**`` is everything under dir). With
    ``--changed-since REF`` the stage runs only when a changed file matches one of them
    (:mod:`rankgate.pipeline.changes`); tests/pipeline checks that they cover every file
    the stage's tests import."""
    dagger: str
    """The Dagger function (ci/) that runs the stage in CI."""
    workflow: str
    """``<file>:<job>`` of the GitHub Actions job (.github/workflows) that runs it."""

    def __post_init__(self) -> None:
        for where in self.where:
            if where not in WHERES:
                raise ValueError(f"stage {self.name}: where={where!r}; use one of {WHERES}")
        for need in self.needs:
            if need not in NEEDS:
                raise ValueError(f"stage {self.name}: need {need!r}; use one of {NEEDS}")
        if "dispatch" in self.where and not self.dispatch_markers:
            raise ValueError(f"stage {self.name}: a dispatched stage needs a marker expression")
        if self.beside and self.alone:
            raise ValueError(
                f"stage {self.name}: a stage in the background cannot measure (a command "
                "with measures=True waits for the background to end)"
            )
        if not self.includes and not self.paths:
            raise ValueError(
                f"stage {self.name}: no paths; name the files it depends on, so that "
                "--changed-since can tell when it must run"
            )

    @property
    def alone(self) -> bool:
        """It measures (a :attr:`Command.measures` command): the gate starts it after the
        stages before it, and its measuring commands only once every stage in the
        background (whatever its place in the list) has ended."""
        return any(command.measures for command in self.commands)

    @property
    def dispatchable(self) -> bool:
        return "dispatch" in self.where

    @property
    def dispatch_markers(self) -> str:
        """The marker expression ``rankgate dispatch --stage NAME`` runs on the target."""
        return self.remote_markers or self.markers
