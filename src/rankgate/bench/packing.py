"""``rankgate bench packing``: greedy vs LPT packing on several length distributions.

For each distribution, one global batch of ``--samples`` sequences is packed onto
``--ranks`` ranks of ``--cap`` tokens by both algorithms; the table shows minibatches
(accumulation steps), balance (mean min/max rank load), efficiency (tokens over the
token budget of those minibatches) and the median time to pack, and ``--json`` ends
with one JSON line holding the same rows.
"""

from __future__ import annotations

import argparse
import json

from rankgate.cliargs import int_at_least
from rankgate.workloads.packing import ALGORITHMS, DISTRIBUTIONS, measure, sample_lengths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    add = parser.add_argument
    add("--samples", type=int_at_least(1), default=1024, help="sequences per batch (default 1024)")
    add("--ranks", type=int_at_least(1), default=8, help="ranks to pack onto (default 8)")
    add("--cap", type=int_at_least(1), default=8192, help="max tokens per rank (default 8192)")
    add("--seed", type=int, default=0, help="seed of the lengths (default 0)")
    add("--repeats", type=int_at_least(1), default=5, help="timed packings per row (default 5)")
    add(
        "--distributions",
        nargs="+",
        default=list(DISTRIBUTIONS),
        choices=list(DISTRIBUTIONS),
        help="length distributions (default: all)",
    )


def run(args: argparse.Namespace) -> int:
    rows = []
    for distribution in args.distributions:
        lengths = sample_lengths(distribution, args.samples, args.cap, args.seed)
        for algorithm in ALGORITHMS:
            metrics = measure(algorithm, lengths, args.cap, args.ranks, args.repeats)
            rows.append(
                {
                    "distribution": distribution,
                    **metrics.as_dict(),
                    "samples": args.samples,
                    "ranks": args.ranks,
                    "cap": args.cap,
                    "tokens": sum(lengths),
                    "seed": args.seed,
                }
            )
    print(format_table(rows))
    if args.json:
        print(json.dumps(rows))
    return 0


def format_table(rows: list[dict]) -> str:
    header = (
        f"{'distribution':<14} {'algorithm':<9} {'minibatches':>11} {'balance':>8} "
        f"{'efficiency':>10} {'ms':>8}"
    )
    lines = [header]
    for r in rows:
        lines.append(
            f"{r['distribution']:<14} {r['algorithm']:<9} {r['minibatches']:>11} "
            f"{r['balance']:>8.3f} {r['efficiency']:>10.3f} {r['seconds'] * 1e3:>8.2f}"
        )
    return "\n".join(lines)
