"""The shards of one run merged into one verdict, each test named with its shard's node.

A sharded dispatch runs N jobs, each one shard of the stage's tests
(``--rankgate-shard K/N``); each job's ranks merge into one :class:`MergedReport`
(:mod:`rankgate.report.junit`). :func:`merge_shards` puts them together: every test keeps
its verdict and gains the properties ``shard`` (K/N), ``node`` and ``job``; the suite
gains one ``shard`` property per shard saying where it ran and how it ended.

A shard whose job left no results (its node failed, it was cancelled, it never
started) is lost: each test it was to run is reported ``not run``, naming the shard,
job, node and how it ended, so the merged run fails and the lost tests are counted. A
test a shard was to run that none of its ranks reported is ``not run`` the same way.

``rankgate merge-junit --shards DIR...`` (:func:`run`) merges the shards' job folders
again, from the files a sharded dispatch leaves in each (:func:`read_shard_dir`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from rankgate.report.junit import MergedReport, MergedTest, merge_files
from rankgate.report.junitfile import GREEN, ReportInputError, read_junit


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardRun:
    """One shard's job, as the merge sees it."""

    index: int
    """K, from 1."""
    count: int
    """N."""
    job_id: str = ""
    node: str = ""
    """The node(s) its job ran on, as the scheduler named them."""
    ended: str = ""
    """How its job ended (a :class:`~rankgate.dispatch.job_outcome.JobOutcome` value)."""
    report: MergedReport | None = None
    """Its ranks' merged results; None when the job left none."""
    expected: tuple[str, ...] | None = None
    """pytest node ids the shard was to run (from the collection and the stored times);
    None when unknown (no collection), () when no test fell to it (its job never ran)."""

    @property
    def name(self) -> str:
        return f"{self.index}/{self.count}"

    def where(self) -> str:
        job = f"job {self.job_id}" if self.job_id else "no job"
        return f"{job} on {self.node or 'no node'}"

    def line(self) -> str:
        """``1/2: job 12 on node1, completed, 57 tests: 57 passed``."""
        tests = self.report.summary_line() if self.report else "no results"
        return f"{self.name}: {self.where()}, {self.ended or 'unknown'}, {tests}"


def case_of(node_id: str) -> tuple[str, str]:
    """(classname, name) pytest's JUnit writes for ``node_id``."""
    path, _, rest = node_id.partition("::")
    parts = rest.split("::") if rest else []
    module = path.removesuffix(".py").replace("/", ".")
    if not parts:
        return "", module
    return ".".join([module, *parts[:-1]]), parts[-1]


def merge_shards(shards: Sequence[ShardRun]) -> MergedReport:
    """One report over every shard (see the module docstring)."""
    tests: list[MergedTest] = []
    for shard in shards:
        labels = (("shard", shard.name), ("node", shard.node), ("job", shard.job_id))
        ran = shard.report.tests if shard.report else []
        seen = {t.node_id for t in ran} | {t.test_id for t in ran}
        tests += [replace(t, labels=labels) for t in ran]
        for node_id in shard.expected or ():
            classname, name = case_of(node_id)
            if node_id not in seen and f"{classname}::{name}" not in seen:
                tests.append(_not_run(classname, name, shard, labels))
        if shard.report is None and shard.expected is None:
            tests.append(_lost_unknown(shard, labels))
    reports = [s.report for s in shards if s.report is not None]
    ranks = tuple(sorted({r for report in reports for r in report.ranks}))
    return MergedReport(
        tests=tests,
        ranks=ranks,
        world_size=max((report.world_size for report in reports), default=0),
        sources=tuple(src for report in reports for src in report.sources),
        suite_name="rankgate-shards",
        system_out="".join(report.system_out for report in reports),
        system_err="".join(report.system_err for report in reports),
        incomplete=tuple(
            f"shard {s.name}: {why}" for s in shards if s.report for why in s.report.incomplete
        ),
        labels=tuple(("shard", shard.line()) for shard in shards),
    )


def _not_run(classname: str, name: str, shard: ShardRun, labels) -> MergedTest:
    lost = shard.report is None
    why = (
        f"shard {shard.name} ({shard.where()}) ended {shard.ended or 'unknown'} and left no results"
        if lost
        else f"shard {shard.name} ({shard.where()}, {shard.ended or 'unknown'}) never reported it"
    )
    return MergedTest(classname, name, "not run", why, why, {}, (), labels)


def _lost_unknown(shard: ShardRun, labels) -> MergedTest:
    message = (
        f"shard {shard.name} ({shard.where()}) ended {shard.ended or 'unknown'} and left no "
        "results; which tests it was to run is unknown (no collection)"
    )
    return MergedTest("rankgate.merge", f"lost_shard_{shard.index}", "error", message, message, {})


# --------------------------------------------------------------------------- command

SHARD_FILE = "shard.json"
"""Written into each shard's job folder before it is submitted: its K, N and the node ids
it is to run, so its folder alone can be merged again (``merge-junit --shards``)."""


def shard_file(index: int, count: int, expected: Sequence[str] | None) -> str:
    """The text of ``shard.json``."""
    data = {
        "shard": index,
        "shards": count,
        "expected": None if expected is None else list(expected),
    }
    return json.dumps(data, indent=1) + "\n"


def read_shard_dir(folder: Path, index: int, count: int) -> ShardRun:
    """One shard's job folder: its ranks' JUnit files merged, where and how its job ran
    (``summary.json``), what it was to run (``shard.json``); each file optional."""
    if not folder.is_dir():
        raise ReportInputError(f"{folder}: not a shard's job folder (no such folder)")
    meta = _json(folder / SHARD_FILE)
    summary = _json(folder / "summary.json")
    files = [read_junit(path) for path in sorted(folder.glob("junit.rank*.xml"))]
    world = summary.get("world_size") or None
    return ShardRun(
        index=int(meta.get("shard", index)),
        count=int(meta.get("shards", count)),
        job_id=str(summary.get("job_id") or ""),
        node=str(summary.get("node") or ""),
        ended=str(summary.get("outcome") or ""),
        report=merge_files(files, world) if files else None,
        expected=None if meta.get("expected") is None else tuple(meta["expected"]),
    )


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReportInputError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ReportInputError(f"{path}: expected a JSON object")
    return data


def run(args: argparse.Namespace) -> int:
    """``rankgate merge-junit --shards DIR...``: exit 0 green, 1 not, 2 bad input."""
    try:
        folders = [Path(f) for f in args.files]
        if not folders:
            raise ReportInputError("--shards needs the shards' job folders")
        runs = [read_shard_dir(f, k, len(folders)) for k, f in enumerate(folders, start=1)]
        report = merge_shards(runs)
        if args.output:
            report.write_xml(args.output)
    except (ReportInputError, OSError, ValueError) as exc:
        print(f"rankgate merge-junit: error: {exc}", file=sys.stderr)
        return 2
    line = "rankgate merge-junit: " + report.summary_line()
    if args.output:
        line += f" -> {args.output}"
    out = sys.stderr if args.json else sys.stdout
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    for shard in runs:
        print(f"shard {shard.line()}", file=out)
    for test in report.tests:
        if test.verdict not in GREEN:
            print(f"{test.verdict.upper()} {test.node_id}: {test.message}", file=out)
    print(line, file=out)
    return 0 if report.ok else 1
