"""The ``rankgate`` command.

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

from rankgate.cliargs import USAGE_EXIT, OneLineParser, UsageError

# name -> (module, one-line help)
_SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "env-check": ("rankgate.envcheck", "report Python, torch, CUDA, NCCL, GPUs, launchers"),
    "run": ("rankgate.pipeline.run_stages", "run test stages by marker (seed runner options)"),
    "bench": (
        "rankgate.bench.cli",
        "run a benchmark (harness, comm, attention, packing, ledger) or compare results (compare)",
    ),
    "dispatch": (
        "rankgate.pipeline.dispatch_stage",
        "run a stage on a remote target (SLURM, interLink)",
    ),
    "merge-junit": ("rankgate.report.merge_command", "merge per-rank JUnit files into one verdict"),
    "report": ("rankgate.report.cli", "summarise results as JSON and HTML"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="rankgate", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = sys.argv[1] if len(sys.argv) > 1 else None
    for name, (module_name, help_text) in _SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        # Only the chosen subcommand's module is imported to add its arguments.
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(sub_parser)
            sub_parser.set_defaults(_run=module.run, _validate=getattr(module, "validate", None))
    return parser


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
