"""The pool's per-test time with a given number of collectives in the trivial test: does the
NCCL pool's shift with the ledger on (docs/harness.md, "What the ledger costs") grow with
the collectives a test issues, or is it there with none?

Usage: python scripts/ledger/pool_body.py --collectives N [--k K] [--backend nccl|gloo]
Runs ``rankgate bench harness``'s pool part alone (no spawn-per-test runs) with N
all_reduce calls per test, world 2, and prints one JSON line: mean, median, 10th and 90th
percentile ms per test over the K steady tests. Whether the ledger is on is the caller's
environment (RANKGATE_LEDGER, and scripts/ledger/pool_variant's LEDGER_VARIANT).
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
    parser.add_argument("--collectives", type=int, required=True)
    parser.add_argument("--k", type=int, default=200)
    parser.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    args = parser.parse_args()
    steady = measure_pool([2], args.backend, args.k, args.collectives)[2]["steady_ms"]
    deciles = statistics.quantiles(steady, n=10)
    print(
        json.dumps(
            {
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
        )
    )


if __name__ == "__main__":
    main()
