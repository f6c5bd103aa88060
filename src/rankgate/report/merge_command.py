"""``rankgate merge-junit``: one rank-aware verdict from per-rank JUnit files
(:mod:`rankgate.report.junit`), or, with ``--shards``, from the job folders of a
sharded dispatch (:mod:`rankgate.report.shards`)."""

from __future__ import annotations

import argparse

from rankgate.report import junit, shards


def add_arguments(parser: argparse.ArgumentParser) -> None:
    junit.add_arguments(parser)
    parser.add_argument(
        "--shards",
        action="store_true",
        help="each FILE is one shard's job folder (a sharded dispatch's): merge the "
        "shards into one verdict naming each shard's node; a shard without results "
        "counts its tests (from its shard.json) as not run",
    )


def run(args: argparse.Namespace) -> int:
    return shards.run(args) if args.shards else junit.run(args)
