"""``rankgate bench NAME``: each benchmark is a module with ``add_arguments`` and ``run``.

``rankgate bench --repeat N NAME ...`` runs a benchmark N times in a row (each run
prints its own output, so a ``--json`` run ends up with N JSON lines, which
``rankgate bench compare`` reads as repetitions), each followed by one line
``{"rankgate_contention": [...]}``: how much of the machine other work took during
that run (:mod:`rankgate.proc.contention`). Without ``--repeat`` a benchmark's output
is its own, its last line its JSON result. Progress goes to stderr: a spinner
on a terminal, one plain line per start and end in CI logs.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time

from rankgate.cliargs import int_at_least, loading_every_subcommand
from rankgate.proc import contention
from rankgate.proc.progress import Progress

_BENCHMARKS: dict[str, tuple[str, str]] = {
    "harness": (
        "rankgate.bench.pool_overhead",
        "measure the harness's cost per test: its worker pool against spawning ranks per test",
    ),
    "comm": (
        "rankgate.bench.comm",
        "measure collective bandwidth and latency per backend and size, as nccl-tests does",
    ),
    "ledger": (
        "rankgate.bench.ledger_cost",
        "measure what the collective ledger adds to each collective call (host and gloo)",
    ),
    "compare": (
        "rankgate.bench.compare",
        "compare benchmark results with a baseline: ratios per metric and a verdict",
    ),
    "attention": (
        "rankgate.bench.attention",
        "measure ring attention against one device and PyTorch's context parallel",
    ),
    "packing": (
        "rankgate.bench.packing",
        "measure greedy against LPT packing of sequences onto ranks",
    ),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--repeat", type=int_at_least(1), default=1, metavar="N",
        help="run the benchmark N times (default 1)",
    )
    sub = parser.add_subparsers(
        dest="benchmark", metavar="BENCHMARK", required=True,
        help="the benchmark to run, or compare; each has its own --help",
    )  # fmt: skip
    for name, (module_name, help_text) in _BENCHMARKS.items():
        bench_parser = sub.add_parser(name, help=help_text, description=help_text)
        bench_parser.set_defaults(_bench_module=module_name)
        # Import only the chosen benchmark: the others may need hardware or extras.
        if name in sys.argv[1:] or loading_every_subcommand():
            importlib.import_module(module_name).add_arguments(bench_parser)


def validate(args: argparse.Namespace) -> None:
    """The chosen benchmark's own checks (UsageError), before any run starts."""
    check = getattr(importlib.import_module(args._bench_module), "validate", None)
    if check is not None:
        check(args)


def run(args: argparse.Namespace) -> int:
    module = importlib.import_module(args._bench_module)
    if args.benchmark == "compare":  # not a measurement: no progress, no repetitions
        return int(module.run(args) or 0)
    progress = Progress(total=args.repeat, what=f"bench {args.benchmark}")
    code = 0
    for i in range(1, args.repeat + 1):
        start = time.monotonic()
        window = contention.Window()
        args.repetition = i  # a benchmark may measure a fixed reference in the first only
        # a benchmark that prints its own progress lines gets no spinner over them
        with progress.step(i, "run", spinner=not getattr(module, "PRINTS_PROGRESS", False)):
            code = int(module.run(args) or 0)
        if args.repeat > 1 and getattr(args, "json", False):
            # How busy the machine was during this run: compare judges CPU timings by it.
            # Only with --repeat: a single run's last line stays its result.
            print(json.dumps({contention.PROBE_KEY: [window.close()]}), flush=True)
        progress.done(i, "failed" if code else "passed", time.monotonic() - start)
        if code:
            break
    return code
