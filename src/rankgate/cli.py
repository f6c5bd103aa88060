"""The ``rankgate`` command.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int``; this file only wires names to modules, importing a module
when its subcommand is used so ``rankgate --help`` stays fast (no torch import).
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help)
_SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "env-check": ("rankgate.envcheck", "report Python, torch, CUDA, NCCL, GPUs, launchers"),
    "run": ("rankgate.pipeline.runner", "run test stages by marker (seed runner options)"),
    "bench": ("rankgate.bench.cli", "run a benchmark (harness, comm)"),
    "dispatch": ("rankgate.dispatch.cli", "run a stage on a remote target (SLURM, interLink)"),
    "merge-junit": ("rankgate.report.junit", "merge per-rank JUnit files into one verdict"),
    "report": ("rankgate.report.cli", "summarise results as JSON and HTML"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rankgate", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = sys.argv[1] if len(sys.argv) > 1 else None
    for name, (module_name, help_text) in _SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        # Only the chosen subcommand's module is imported to add its arguments.
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(sub_parser)
            sub_parser.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is not None:
        sys.argv[1:] = argv
    parser = build_parser()
    args = parser.parse_args()
    if args.command is None:
        parser.print_help()
        return 2
    return int(args._run(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
