"""The pool's per-test time with a given number of collectives in the trivial test: does the
NCCL pool's shift with the ledger on (docs/ledger-cost.md) grow with
the collectives a test issues, or is it there with none?

Usage: python scripts/ledger/pool_body.py [--collectives N] [--k K] [--backend nccl|gloo]
       [--worlds 2 4]
Runs ``rankgate bench harness``'s pool part alone (no spawn-per-test runs) with N
all_reduce calls per test (default 1, the benchmark's), world 2 or the worlds given (one
pytest session), and prints one JSON line per world: mean, median, 10th and 90th
percentile ms per test over the K steady tests. Whether the ledger is on is the caller's
environment (RANKGATE_LEDGER, and scripts/ledger/pool_variant's LEDGER_VARIANT).
scripts/gpu/ledger-ab.sh runs it with the ledger on and off, alternated.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

from rankgate.bench.pool_overhead import measure_pool
from rankgate.harness import ledger


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collectives", type=int, default=1)
    parser.add_argument("--k", type=int, default=200)
    parser.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    parser.add_argument("--worlds", type=int, nargs="+", default=[2])
    args = parser.parse_args()
    pool = measure_pool(args.worlds, args.backend, args.k, args.collectives)
    for world in args.worlds:
        print(json.dumps({"world": world, **_figures(args, pool[world]["steady_ms"])}))


def _figures(args: argparse.Namespace, steady: list[float]) -> dict:
    deciles = statistics.quantiles(steady, n=10)
    return {
        "backend": args.backend,
        "collectives": args.collectives,
        "ledger": "1" if ledger.enabled(args.backend) else "0",
        "variant": os.environ.get("LEDGER_VARIANT", "none"),
        "k": args.k,
        "mean_ms": round(statistics.fmean(steady), 3),
        "median_ms": round(statistics.median(steady), 3),
        "p10_ms": round(deciles[0], 3),
        "p90_ms": round(deciles[-1], 3),
    }


if __name__ == "__main__":
    main()
