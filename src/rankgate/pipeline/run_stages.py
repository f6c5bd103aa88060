"""``rankgate run``: runs the pipeline's stages, or narrower test selections, chosen by the
seed runner's options (mapped onto stages and markers); each option's help says which.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path

from rankgate.cliargs import UsageError
from rankgate.dispatch.profile import profile_problem
from rankgate.pipeline import executor, stages
from rankgate.pipeline.options import Options
from rankgate.pipeline.probe import Machine
from rankgate.pipeline.stage_outcome import Outcome
from rankgate.pipeline.stages import Stage

_CPU_TIERS = "not gpu and not hpc and not container and not perf"


def _tests(name: str, markers: str, *paths: str, keyword: str = "") -> Stage:
    """A pytest-only stage run here: the seed runner's narrower selections."""
    argv = ("pytest", *paths, *(("-k", keyword) if keyword else ()))
    return Stage(
        name=name,
        description=f"rankgate run --{name}",
        markers=markers,
        where=("local",),
        commands=(stages.Command(argv=argv, label="pytest", optional_paths=paths),),
        dagger="test-cpu",
        workflow="ci.yml:unit",
        paths=("**",),  # a selection the user asked for by name runs whatever changed
    )


# seed runner flag -> the stage it runs (built when asked)
SELECTIONS: dict[str, Callable[[], Stage]] = {
    "unit": lambda: stages.get("unit"),
    "integration": lambda: stages.get("dist"),
    "benchmark": lambda: stages.get("bench"),
    "performance": lambda: _tests("performance", stages.get("bench").markers),
    "error": lambda: _tests("error", _CPU_TIERS, "tests/harness"),
    "auto": lambda: _tests("auto", _CPU_TIERS, "suites/comm", keyword="auto or select"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "Without a selection it runs the gate: env-check, then every stage this machine can\n"
        "run, and a table of verdicts. `rankgate run --list` names the stages."
    )
    _add_selection(parser.add_argument_group("what to run (default: the gate)"))
    _add_how(parser.add_argument_group("how"))


def _add_selection(pick) -> None:
    """The options that choose what runs: stages, shortcuts for them, a narrower selection."""
    pick.add_argument(
        "--stage", action="append", default=[], choices=stages.names(), metavar="NAME",
        help=f"run this stage; repeatable ({', '.join(stages.names())}; default: the gate)",
    )  # fmt: skip
    pick.add_argument(
        "--unit", action="store_true", help="run stage unit: single-process tests (marker unit)"
    )
    pick.add_argument(
        "--integration", action="store_true",
        help="run stage dist: multi-rank tests on CPU (marker 'dist and not gpu')",
    )  # fmt: skip
    pick.add_argument(
        "--performance", action="store_true",
        help="run only stage bench's tests (marker perf), without its benchmark commands",
    )  # fmt: skip
    pick.add_argument(
        "--benchmark", action="store_true",
        help="run stage bench: perf tests, the harness benchmark and the baseline comparisons",
    )  # fmt: skip
    pick.add_argument(
        "--error", action="store_true",
        help="run the harness's tests, fault injection included (tests/harness), at every CPU tier",
    )  # fmt: skip
    pick.add_argument(
        "--auto", action="store_true",
        help="run the backend detection and selection tests (suites/comm, -k 'auto or select')",
    )  # fmt: skip
    pick.add_argument(
        "--markers", default="", metavar="EXPR",
        help='run only tests matching this marker expression ("a,b" means "a and b"); with '
        "stages it narrows each one (default: each stage's own markers)",
    )  # fmt: skip
    pick.add_argument(
        "--file", action="append", default=[], metavar="PATH",
        help="run only tests under this file, folder or node id; repeatable (default: all)",
    )  # fmt: skip
    pick.add_argument(
        "--env-check", action="store_true",
        help="run `rankgate env-check` first; given alone, run only that",
    )  # fmt: skip


def _add_how(how) -> None:
    """The options that say how the chosen stages run and where their output goes."""
    how.add_argument(
        "--coverage", action="store_true",
        help="measure coverage of rankgate with pytest-cov (default: off)",
    )  # fmt: skip
    how.add_argument(
        "--parallel", nargs="?", const="auto", default=None, metavar="N", type=_workers,
        help="run pytest under pytest-xdist with N workers (a number, auto or logical; "
        "--parallel alone: auto; default: the stage's own setting)",
    )  # fmt: skip
    how.add_argument(
        "--json", action="store_true", help="end with one JSON line: each stage's outcome"
    )
    how.add_argument(
        "--profile", default="", metavar="SITE.toml",
        help="site profile: stages gpu and hpc are dispatched to its target "
        "(default: none, they run here or are skipped)",
    )  # fmt: skip
    how.add_argument(
        "--out", default="out", type=Path, metavar="DIR",
        help="folder for JUnit files, logs and reports (default: out)",
    )  # fmt: skip
    how.add_argument(
        "--strict", action="store_true",
        help="a skipped stage fails the run (default: a skipped stage is reported, not failed)",
    )  # fmt: skip
    how.add_argument(
        "--quick", action="store_true",
        help="leave out tests and stages marked slow, naming them in the table "
        "(default: run them)",
    )  # fmt: skip
    how.add_argument("--list", action="store_true", help="list the stages and exit")


def validate(args: argparse.Namespace) -> None:
    """Before any stage runs (``rankgate`` calls it): a profile the dispatched stages could
    not read would otherwise surface after the local stages, and a missing --file as one
    failed stage per stage."""
    problem = profile_problem(args.profile) if args.profile else None
    if problem:
        raise UsageError(problem)
    for path in args.file:
        if not Path(path.split("::")[0]).exists():  # a node id names its file first
            raise UsageError(f"--file {path}: no such file or directory")
    if problem := marker_problem(normalise_markers(args.markers)):
        raise UsageError(f"--markers {args.markers}: {problem}")


def marker_problem(expression: str) -> str:
    """Why pytest's ``-m`` would refuse ``expression`` ("" when it reads it): caught here,
    a typo is one line instead of a stage failed with pytest's usage error."""
    if not expression:
        return ""
    from _pytest.mark.expression import Expression

    try:
        Expression.compile(expression)
    except SyntaxError as exc:  # pytest's own message, with the column it stopped at
        return f"not a marker expression ({exc.msg} at column {exc.offset})"
    return ""


def _workers(text: str) -> str:
    """pytest-xdist's -n: a number of workers, or auto / logical."""
    if text in ("auto", "logical") or (text.isdigit() and int(text) >= 0):
        return text
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a number of workers (a whole number, auto or logical)"
    )


def run(args: argparse.Namespace) -> int:
    if args.list:
        for stage in stages.all_stages():
            print(f"{stage.name:<10} {stage.description}")
        return 0
    options = Options(
        out_dir=args.out,
        profile=args.profile,
        strict=args.strict,
        quick=args.quick,
        pytest_args=tuple(pytest_args(args)),
    )
    selected = plan(args)
    outcomes: list[Outcome] = []
    if args.env_check and selected is not None:
        outcomes += executor.gate_checks(options)
        if not selected:  # --env-check alone
            return _finish(args, outcomes, options)
    if selected is None:  # nothing chosen: the gate
        outcomes += executor.run_gate(options)
        return _finish(args, outcomes, options, table_printed=True)
    machine = Machine()
    outcomes += [executor.run_stage(stage, options, machine) for stage in selected]
    return _finish(args, outcomes, options)


def plan(args: argparse.Namespace) -> list[Stage] | None:
    """The stages the options select, in order; None means the whole gate."""
    if "gate" in args.stage:
        others = [f"--stage {name}" for name in args.stage if name != "gate"]
        others += [f"--{flag}" for flag in SELECTIONS if getattr(args, flag)]
        others += ["--markers"] if args.markers else []
        if others:
            raise SystemExit(
                f"rankgate run: --stage gate runs every stage; it does not combine with "
                f"{', '.join(others)}. Drop --stage gate to run only those, or drop them."
            )
        return None
    chosen = [stages.get(name) for name in args.stage]
    chosen += [build() for flag, build in SELECTIONS.items() if getattr(args, flag)]
    markers = normalise_markers(args.markers)
    if markers and chosen:
        chosen = [_narrow(stage, markers) for stage in chosen]
    elif not chosen and (markers or args.file):
        chosen = [_tests("markers" if markers else "files", markers)]
    if not chosen:
        return [] if args.env_check else None
    unique: dict[str, Stage] = {}
    for stage in chosen:
        unique.setdefault(stage.name, stage)
    return list(unique.values())


def pytest_args(args: argparse.Namespace) -> list[str]:
    """pytest arguments every pytest command of the run gets."""
    extra = list(args.file)
    if args.parallel:
        _require("xdist", "--parallel", "pytest-xdist")
        extra += ["-n", args.parallel]
    if args.coverage:
        _require("pytest_cov", "--coverage", "pytest-cov")
        extra += ["--cov=rankgate", "--cov-report=term-missing"]
    return extra


def normalise_markers(text: str) -> str:
    """The seed runner's ``"a,b"`` means both markers; anything else is an expression."""
    text = text.strip()
    if "," in text and not any(op in text.split() for op in ("and", "or", "not")):
        return " and ".join(part.strip() for part in text.split(",") if part.strip())
    return text


def _narrow(stage: Stage, markers: str) -> Stage:
    expression = f"({stage.markers}) and ({markers})" if stage.markers else markers
    return dataclasses.replace(stage, markers=expression)


def _require(module: str, flag: str, package: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise SystemExit(f"rankgate run {flag} needs {package}: pip install {package}")


def _finish(
    args: argparse.Namespace,
    outcomes: list[Outcome],
    options: Options,
    *,
    table_printed: bool = False,
) -> int:
    if not table_printed and len(outcomes) > 1:
        print(executor.summary_table(outcomes), flush=True)
    if args.json:
        print(json.dumps([o.to_json() for o in outcomes]), flush=True)
    return 1 if executor.verdict(outcomes, allow_skipped=not options.strict) else 0
