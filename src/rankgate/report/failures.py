"""Each failed test with its ranks' own tracebacks and logs, for the HTML and Markdown reports.

:func:`failed_tests` reads the same JUnit files as :func:`rankgate.report.json_summary.summarize`
and returns one :class:`FailedTest` per failed or errored test. Where a test's ranks come
from:

- per-rank files (the harness's in-place mode, dispatched jobs): merged with the rules of
  :mod:`rankgate.report.junit`; each rank's case gives its traceback and output;
- one file from a pool run: the harness's ``rankgate.rank<r>.*`` properties give each
  rank's outcome and output, and its failure text holds one ``--- rank r: failed ---``
  section per failing rank;
- a file written by ``rankgate merge-junit``: its ``rank_outcomes`` property, and each
  rank's section of the failure text and lines of its output (:mod:`.mergedcase`), so it
  reads as the per-rank files it was merged from;
- an ordinary test: no ranks, the failure text as it is.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rankgate.harness import divergence
from rankgate.report import mergedcase
from rankgate.report.junit import MergedTest, merge_files
from rankgate.report.junitfile import CaseResult, JUnitFile
from rankgate.report.rankresults import expand, read_any
from rankgate.report.runs import with_run

_RANK_SECTION = re.compile(r"^-{3,} rank (\d+): (\w+) -{3,}$", re.MULTILINE)
"""The harness's heading of one failing rank's section in a failure text."""
_REPRODUCE = re.compile(r"^reproduce: .*$", re.MULTILINE)
_RANK_PROP = re.compile(r"^rankgate\.rank(\d+)\.(outcome|stdout|stderr)$")


@dataclass(frozen=True, slots=True)
class RankDetail:
    """What one rank did in one test."""

    rank: int
    outcome: str
    traceback: str = ""
    stdout: str = ""
    stderr: str = ""

    @property
    def bad(self) -> bool:
        return self.outcome not in ("passed", "skipped", "xfailed")


@dataclass(frozen=True, slots=True)
class FailedTest:
    """One failed or errored test, with everything a reader needs to act on it."""

    id: str
    outcome: str
    """failed or error."""
    source: str
    """The JUnit file, or the directory of per-rank files, it came from."""
    message: str
    """First line of the failure message."""
    ranks: tuple[RankDetail, ...] = ()
    """Every rank's outcome and texts, the likely root cause first (a crash, then a
    failure, then a hang, as the harness orders them), then the other bad ranks, then
    the rest by rank; empty for a test that ran without ranks."""
    text: str = ""
    """The whole failure text (for a test without ranks, the traceback)."""
    reproduce: str = ""
    """The harness's reproduction line, when the report carries one."""
    stdout: str = ""
    stderr: str = ""
    stopped_run: bool = False
    """This test stopped the run: the tests after it never ran."""

    @property
    def failing_ranks(self) -> tuple[int, ...]:
        return tuple(sorted(r.rank for r in self.ranks if r.bad))

    @property
    def root_cause(self) -> RankDetail | None:
        """The rank most likely to have caused the failure (the first bad rank)."""
        return next((r for r in self.ranks if r.bad), None)

    @property
    def hung(self) -> tuple[int, ...]:
        """Ranks that hung: their report carries their Python stacks."""
        return tuple(r.rank for r in self.ranks if r.outcome == "hung")


def failed_tests(junit_paths: Iterable[str | Path], run_id: str | None = None) -> list[FailedTest]:
    """Every failed or errored test of these JUnit files, in file order (a test that
    never ran is no failure of its own: the report lists those apart); of a folder of
    several runs' files, run ``run_id``'s where it is there, else the newest's."""
    plain, per_rank = read_by_rank(junit_paths)
    found: list[FailedTest] = []
    for f in plain:
        by_id: dict[str, CaseResult] = {}
        for case in f.cases:
            prev = by_id.get(case.test_id)
            by_id[case.test_id] = case if prev is None else prev.combine(case)
        red = ("failed", "error")
        found += [_from_case(f.path, c) for c in by_id.values() if c.outcome in red]
    for directory, files in per_rank.items():
        merged = merge_files(files, run_id=with_run(files, run_id))
        bad = [t for t in merged.tests if t.verdict in ("failed", "error")]
        found += [_from_merged(directory, t) for t in bad]
    return found


_STOPPED = re.compile(r"stopped the run: (\S+)")


def stopper_first(failures: list[FailedTest], not_run: Iterable[str]) -> list[FailedTest]:
    """``failures`` with the test that stopped a run first (the one the not-run tests'
    reasons name, "rank 0 stopped the run: <test> ..."), marked ``stopped_run``."""
    named = {m.group(1) for reason in not_run if (m := _STOPPED.search(reason))}
    ids = {_junit_id(n) for n in named} | named
    first = [dataclasses.replace(t, stopped_run=True) for t in failures if t.id in ids]
    return first + [t for t in failures if t.id not in ids]


def _junit_id(nodeid: str) -> str:
    """'pkg/test_a.py::Class::test_b' as a JUnit id: 'pkg.test_a.Class::test_b'."""
    path, _, rest = nodeid.partition("::")
    parts = [path.removesuffix(".py").replace("/", "."), *rest.split("::")]
    return ".".join(parts[:-1]) + "::" + parts[-1]


def read_by_rank(
    junit_paths: Iterable[str | Path],
) -> tuple[list[JUnitFile], dict[str, list[JUnitFile]]]:
    """The files behind these paths (a directory: its per-rank JUnit files, and the results
    files of ranks that wrote none), as merge-junit reads them: ordinary files, and per-rank
    files grouped by directory (one run per directory)."""
    plain: list[JUnitFile] = []
    per_rank: dict[str, list[JUnitFile]] = {}
    for f in (read_any(p) for p in expand(junit_paths)):
        if f.rank is not None or (f.cases and all(c.rank is not None for c in f.cases)):
            per_rank.setdefault(str(Path(f.path).parent), []).append(f)
        else:
            plain.append(f)
    return plain, per_rank


def _from_merged(directory: str, test: MergedTest) -> FailedTest:
    worded = test.rank_outcomes  # as merge-junit says them: crashed, hung
    ranks = tuple(
        RankDetail(
            rank=rank,
            outcome=worded[rank],
            traceback=res.text,
            stdout=res.system_out,
            stderr=res.system_err,
        )
        for rank, res in sorted(test.results.items())
    ) + tuple(RankDetail(rank=r, outcome="missing", traceback="no result") for r in test.missing)
    texts = [test.details, *(r.traceback for r in ranks), *(r.stdout for r in ranks)]
    return FailedTest(
        id=test.test_id,
        outcome=test.verdict,
        source=directory,
        message=_first_line(test.message),
        ranks=_root_cause_first(ranks, (), divergence.blamed_in(test.message)),
        text=test.details,
        reproduce=_reproduce(*texts),
    )


def _from_case(source: str, case: CaseResult) -> FailedTest:
    props = dict(case.properties)
    per_rank: dict[int, dict[str, str]] = {}
    for name, value in case.properties:
        if match := _RANK_PROP.match(name):
            per_rank.setdefault(int(match.group(1)), {})[match.group(2)] = value
    sections = _rank_sections(case.text)
    order = tuple(sections)  # the pool's sections come root cause first
    if not per_rank and props.get("rank_outcomes"):  # written by merge-junit
        sections, order = mergedcase.rank_texts(case.text), ()  # ordered as from the folder
        logs = {"stdout": mergedcase.rank_logs(case.system_out),
                "stderr": mergedcase.rank_logs(case.system_err)}  # fmt: skip
        for pair in props["rank_outcomes"].split(","):
            rank, _, outcome = pair.partition("=")
            per_rank[int(rank)] = {"outcome": outcome}
            per_rank[int(rank)].update((k, v[int(rank)]) for k, v in logs.items() if int(rank) in v)
            if outcome == "missing":  # as the folder's merge says it
                sections.setdefault(int(rank), "no result")
    ranks = tuple(
        RankDetail(
            rank=rank,
            outcome=fields.get("outcome", "unknown"),
            traceback=sections.get(rank, ""),
            stdout=fields.get("stdout", ""),
            stderr=fields.get("stderr", ""),
        )
        for rank, fields in sorted(per_rank.items())
    )
    ranks = _root_cause_first(ranks, order, divergence.blamed_in(case.message))
    return FailedTest(
        id=case.test_id,
        outcome=case.outcome,
        source=source,
        message=_first_line(case.message),
        ranks=ranks,
        text=case.text,
        reproduce=_reproduce(case.text, case.system_out),
        stdout=case.system_out,
        stderr=case.system_err,
    )


_SEVERITY = ("crashed", "failed", "error", "hung", "missing")
_IN_COLLECTIVE = "torch/distributed/"
"""A hung rank whose stack passes through torch.distributed waits for its peers."""


def _root_cause_first(
    ranks: tuple[RankDetail, ...], order: tuple[int, ...], blamed: tuple[int, ...] = ()
) -> tuple[RankDetail, ...]:
    """Bad ranks in ``order`` (the harness's sections: root cause first), else by severity;
    the other ranks after them, by rank. Among hung ranks, those the ledgers blame (they
    never issued a collective their peers wait in: ``blamed``) come first, then one that
    is not waiting in a collective: its peers are waiting for it."""

    def key(r: RankDetail) -> tuple:
        if not r.bad:
            return (2, 0, 0, r.rank)
        waiting = (r.rank not in blamed, r.outcome == "hung" and _IN_COLLECTIVE in r.traceback)
        if r.rank in order:
            severity = _SEVERITY.index(r.outcome) if r.outcome in _SEVERITY else 0
            return (0, severity, waiting, order.index(r.rank))
        severity = _SEVERITY.index(r.outcome) if r.outcome in _SEVERITY else len(_SEVERITY)
        return (1, severity, waiting, r.rank)

    return tuple(sorted(ranks, key=key))


def _rank_sections(text: str) -> dict[int, str]:
    """The harness's per-rank sections of a failure text: rank -> its traceback."""
    heads = list(_RANK_SECTION.finditer(text))
    sections = {}
    for head, nxt in zip(heads, [*heads[1:], None]):
        body = text[head.end() : nxt.start() if nxt else len(text)]
        body = _REPRODUCE.sub("", body)
        sections[int(head.group(1))] = body.strip("\n")
    return sections


def _reproduce(*texts: str) -> str:
    for text in texts:
        if match := _REPRODUCE.search(text or ""):
            return match.group(0)
    return ""


def _first_line(message: str) -> str:
    lines = message.strip().splitlines()
    return lines[0] if lines else ""
