"""``rankgate merge-junit``: one rank-aware verdict from per-rank JUnit files
(:mod:`rankgate.report.junit`), or, with ``--shards``, from the job folders of a
sharded dispatch (:mod:`rankgate.report.shard_merge`).

``rankgate merge-junit FILES... [-o OUT.xml] [--world N] [--json] [--run-id ID]``; exit
0 when nothing failed or errored and the run is complete, 1 otherwise, 2 on bad input.
Of a folder holding several in-place runs' files, the newest run's are read (or run
ID's), and one line says which files were left out (:mod:`rankgate.report.runs`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from rankgate.cliargs import int_at_least
from rankgate.harness.attempts import attempts_line
from rankgate.report import shard_merge
from rankgate.report.junit import merge_junit
from rankgate.report.junitfile import GREEN, ReportInputError
from rankgate.report.rankresults import expand


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _add_merge_arguments(parser)
    parser.add_argument(
        "--shards",
        action="store_true",
        help="each FILE is one shard's job folder (a sharded dispatch's): merge the "
        "shards into one verdict naming each shard's node; a shard without results "
        "counts its tests (from its shard.json) as not run",
    )


def run(args: argparse.Namespace) -> int:
    return shard_merge.run(args) if args.shards else _merge(args)


def _add_merge_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="per-rank JUnit files (junit.rank<r>.xml), or directories holding them",
    )
    parser.add_argument(
        "-o", "--output", metavar="OUT.xml",
        help="write the merged JUnit here (default: none written; the verdict is printed)",
    )  # fmt: skip
    parser.add_argument(
        "--world",
        type=int_at_least(1),
        metavar="N",
        help="expected number of ranks; a rank without a file is an error (default: the "
        "ranks the files name)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the merged verdicts as JSON on stdout (the summary goes to stderr)",
    )
    parser.add_argument(
        "--run-id",
        metavar="ID",
        help="of a folder holding several in-place runs' files, read run ID's "
        "(each file's rankgate.run_id; default: the newest run's)",
    )


def _refuse_output_among_inputs(output: str, inputs: Sequence[str]) -> None:
    """Writing the merge over one of its inputs would lose that rank's results."""
    target = Path(output).resolve()
    for given in expand(inputs):
        if Path(given).resolve() == target:
            raise ReportInputError(
                f"-o {output} is one of the inputs; write the merge to another file"
            )


def _merge(args: argparse.Namespace) -> int:
    """Exit 0 when nothing failed or errored, 1 otherwise, 2 on bad input."""
    if args.world is not None and args.world < 1:
        print(f"rankgate merge-junit: --world must be ≥ 1, got {args.world}", file=sys.stderr)
        return 2
    try:
        if args.output:
            _refuse_output_among_inputs(args.output, args.files)
        report = merge_junit(args.files, world_size=args.world, run_id=args.run_id)
        if args.output:
            report.write_xml(args.output)
    except (ReportInputError, OSError) as exc:
        print(f"rankgate merge-junit: error: {exc}", file=sys.stderr)
        return 2
    line = "rankgate merge-junit: " + report.summary_line()
    if args.output:
        line += f" -> {args.output}"
    if report.other_runs:  # the one line saying which run was read
        print(f"rankgate merge-junit: {report.other_runs}", file=sys.stderr if args.json else None)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        print(line, file=sys.stderr)
    else:
        for test in report.tests:
            if test.verdict not in GREEN:
                print(f"{test.verdict.upper()} {test.node_id}: {test.message}")
            if test.attempts:
                word = "FLAKY" if test.flaky else "RERUN"
                print(f"{word} {test.node_id}: {attempts_line(test.attempts)}")
        print(line)
    return 0 if report.ok else 1
