"""How to run stages: :class:`Options`, from nox posargs or ``rankgate run``'s flags."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rankgate.dispatch.profile import profile_problem
from rankgate.pipeline import stages


@dataclass(kw_only=True, slots=True)
class Options:
    """How to run stages; nox posargs and ``rankgate run`` options both end up here."""

    out_dir: Path = Path("out")
    """Where products go (JUnit under junit/, benchmark JSON under bench/, gate.json)."""
    profile: str = ""
    """Site profile (TOML) for ``rankgate dispatch``: gpu and hpc run remotely with it."""
    shards: int = 0
    """Dispatched stages run as this many jobs, one shard of the tests each (``--shards N``);
    0 = what the profile says."""
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
        """``[--profile P] [--shards N] [--out DIR] [--strict] [--quick | --full]
        [--changed-since REF] [--only S,S] [pytest args...]``; ``quick``: the default when
        neither is given."""
        options, rest = cls(quick=quick), list(args)
        flags = (
            "--profile", "--shards", "--out", "--strict", "--quick", "--full", "--changed-since",
            "--only",
        )  # fmt: skip
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
            if not rest or rest[0] in flags:  # "--only --strict": --only was given no value
                raise SystemExit(f"{flag} needs a value: {_VALUES[flag]()}")
            value = rest.pop(0)
            if flag == "--profile":
                options.profile = _readable_profile(value)
            elif flag == "--shards":
                options.shards = _shard_count(value)
            elif flag == "--changed-since":
                options.changed_since = value
            elif flag == "--only":
                options.only = gate_stages(value)
            else:
                options.out_dir = Path(value)
        options.pytest_args = tuple(rest)
        return options


_VALUES = {
    "--profile": lambda: "a site profile (TOML), e.g. nox -s gpu -- --profile site.toml",
    "--shards": lambda: "a number of jobs, e.g. nox -s gpu -- --profile site.toml --shards 4",
    "--out": lambda: "the output folder, e.g. nox -s unit -- --out out",
    "--changed-since": lambda: "a git ref, e.g. nox -s gate -- --changed-since origin/main",
    "--only": lambda: (
        f"some of the gate's stages {','.join(stages.get('gate').includes)}, "
        "e.g. nox -s gate -- --only lint,unit"
    ),
}
"""What each option's value is, with an example: the one line a missing value gets."""


def _shard_count(value: str) -> int:
    """``--shards N``: a whole number of jobs, at least 1."""
    if not value.isdigit() or int(value) < 1:
        raise SystemExit(f"--shards {value!r}: give a whole number of jobs, at least 1")
    return int(value)


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
