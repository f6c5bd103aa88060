"""The ``rankgate`` command line.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; this file only wires names to modules, importing a module
when its subcommand is used so ``rankgate --help`` stays fast (no torch import).
A module may also expose ``validate(args)``, run before ``run``: bad input, from
argparse or from there, is one line and exit 2 before any work (``rankgate.cliargs``).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from rankgate import __version__
from rankgate.cliargs import (
    USAGE_EXIT,
    OneLineParser,
    UsageError,
    every_subcommand,
    loading_every_subcommand,
)

# name -> (module, one-line help)
_SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "env-check": (
        "rankgate.envcheck",
        "print what this machine offers distributed tests: Python, torch, CUDA, NCCL, GPUs, "
        "launchers",
    ),
    "run": (
        "rankgate.pipeline.run_stages",
        "run the pipeline's stages here, or a narrower selection of tests (default: the gate)",
    ),
    "bench": (
        "rankgate.bench.bench_command",
        "run a benchmark (harness, comm, ledger, attention, packing) or compare results with "
        "a baseline (compare)",
    ),
    "dispatch": (
        "rankgate.pipeline.dispatch_stage",
        "run a stage's tests on a remote target (SLURM, interLink) and bring back one verdict",
    ),
    "merge-junit": (
        "rankgate.report.merge_command",
        "merge the per-rank JUnit files of an in-place run into one verdict per test",
    ),
    "report": (
        "rankgate.report.report_command",
        "summarise a run's JUnit and benchmark results as report.json, report.html and "
        "summary.md",
    ),
}

DESCRIPTION = (
    "rankgate: multi-rank pytest tests, benchmarks and the CI pipeline that runs them. "
    "`rankgate COMMAND --help` shows a command's options and their defaults."
)


def build_parser() -> argparse.ArgumentParser:
    """The parser; only the chosen subcommand's options are added (every subcommand's
    under :func:`rankgate.cliargs.every_subcommand`, for the reference pages)."""
    parser = OneLineParser(prog="rankgate", description=DESCRIPTION)
    parser.add_argument(
        "--version", action="version", version=f"rankgate {__version__}",
        help="print rankgate's version and exit",
    )  # fmt: skip
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", help="what to do; each command has its own --help"
    )
    chosen = sys.argv[1] if len(sys.argv) > 1 else None
    for name, (module_name, help_text) in _SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        # Only the chosen subcommand's module is imported to add its arguments.
        if name == chosen or loading_every_subcommand():
            module = importlib.import_module(module_name)
            module.add_arguments(sub_parser)
            sub_parser.set_defaults(_run=module.run, _validate=getattr(module, "validate", None))
    return parser


def every_parser() -> list[argparse.ArgumentParser]:
    """The parser of ``rankgate`` and of every subcommand under it, each with its options,
    in the order ``--help`` lists them."""
    with every_subcommand():
        found = [build_parser()]
    for parser in found:  # grows as subcommands are found
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                found.extend(dict.fromkeys(action.choices.values()))
    return found


def main(argv: list[str] | None = None) -> int:
    if argv is not None:
        sys.argv[1:] = argv
    parser = build_parser()
    args = parser.parse_args()
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if args._validate is not None:
            args._validate(args)
        return int(args._run(args) or 0)
    except UsageError as exc:
        print(f"rankgate {args.command}: error: {exc}", file=sys.stderr)
        return USAGE_EXIT


if __name__ == "__main__":
    raise SystemExit(main())
