"""``rankgate bench NAME``: each benchmark is a module with ``add_arguments`` and ``run``."""

from __future__ import annotations

import argparse
import importlib
import sys

_BENCHMARKS: dict[str, tuple[str, str]] = {
    "harness": ("rankgate.bench.harness", "per-test overhead: worker pool vs spawn per test"),
    "comm": ("rankgate.bench.comm", "collective bandwidth and latency, nccl-tests method"),
    "packing": ("rankgate.bench.packing", "greedy vs LPT packing of sequences onto ranks"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    for name, (module_name, help_text) in _BENCHMARKS.items():
        bench_parser = sub.add_parser(name, help=help_text, description=help_text)
        bench_parser.set_defaults(_bench_module=module_name)
        # Import only the chosen benchmark: the others may need hardware or extras.
        if name in sys.argv[1:]:
            importlib.import_module(module_name).add_arguments(bench_parser)


def run(args: argparse.Namespace) -> int:
    return int(importlib.import_module(args._bench_module).run(args) or 0)
