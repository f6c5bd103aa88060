"""Read JUnit XML files, as pytest and other tools write them, rank-aware.

:func:`read_junit` parses one file (root ``<testsuites>`` or ``<testsuite>``) into a
:class:`JUnitFile` of :class:`CaseResult`. A case's rank comes from a ``rank`` property
of the testcase, else of its testsuite, else from the file name (``rank<r>``); a file
whose name and rank property disagree is refused. Unreadable input raises
:class:`ReportInputError` naming the file.
"""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from rankgate.errors import RankgateError
from rankgate.harness.quarantine import STALE_PROPERTY
from rankgate.harness.rankfiles import RUN_ID_PROPERTY
from rankgate.harness.verdict_lines import (
    INTERRUPTED_PROPERTY,
    INTERRUPTED_TEST_PROPERTY,
    NODE_ID_PROPERTY,
    NOT_RUN_PREFIX,
)

OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "not run")
"""Outcomes of one case on one rank, and verdicts of a merged test. ``not run``: a test
an in-place run never started because a rank stopped the run (still a red verdict)."""

GREEN = frozenset({"passed", "skipped", "xfailed", "xpassed"})
"""Outcomes that leave a run green."""
XPASS_MESSAGE = "xfail-marked test passes unexpectedly"
"""pytest's JUnit message for a non-strict xfail test that passed."""

_RANK_IN_NAME = re.compile(r"rank[-_.]?(\d+)", re.IGNORECASE)
"""A rank in a file name: junit.rank3.xml (in-place mode), junit-rank3.xml (dispatch)."""
# When one rank reports a test twice (pytest does for a failure in call followed by
# an error in teardown), the worse outcome stands for that rank.
_SEVERITY = {
    "passed": 0,
    "xpassed": 1,
    "xfailed": 1,
    "skipped": 1,
    "not run": 2,
    "error": 3,
    "failed": 4,
}
_RESULT_TAGS = {"failure": "failed", "error": "error", "skipped": "skipped"}


def _child_outcome(child: ET.Element) -> str | None:
    """The outcome one result element of a testcase stands for (None: not a result)."""
    outcome = _RESULT_TAGS.get(child.tag)
    message = child.get("message", "")
    if outcome == "skipped" and child.get("type") == "pytest.xfail":
        return "xfailed"
    if outcome == "skipped" and message == XPASS_MESSAGE:
        return "xpassed"
    if outcome == "error" and NOT_RUN_PREFIX in message[: 40 + len(NOT_RUN_PREFIX)]:
        return "not run"  # pytest's message: 'failed on setup with "not run: ..."'
    return outcome


def not_run_reason(message: str) -> str:
    """Why a test was not run, from its JUnit message ('failed on setup with "not run:
    rank 0 stopped the run: ..."' gives 'rank 0 stopped the run: ...'); "" if none."""
    at = message.find(NOT_RUN_PREFIX)
    if at < 0:
        return ""
    reason = message[at + len(NOT_RUN_PREFIX) :].split("\n", 1)[0]
    return reason[:-1] if message.startswith("failed on ") and reason.endswith('"') else reason


class ReportInputError(RankgateError):
    """An input file that cannot be used: missing, not XML, not JUnit, no rank."""


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One test's result on one rank, as its JUnit file reports it."""

    classname: str
    name: str
    rank: int | None
    """None for a file without rank information (an ordinary or a merged report)."""
    outcome: str
    message: str = ""
    text: str = ""
    time: float = 0.0
    system_out: str = ""
    system_err: str = ""
    properties: tuple[tuple[str, str], ...] = ()
    source: str = ""
    """The JUnit file it was read from."""
    result_type: str = ""
    """The ``type`` of its result element: pytest writes pytest.xfail for an expected failure."""

    @property
    def test_id(self) -> str:
        return f"{self.classname}::{self.name}" if self.classname else self.name

    @property
    def node_id(self) -> str | None:
        """pytest's node id, where the rank recorded it."""
        return dict(self.properties).get(NODE_ID_PROPERTY)

    def combine(self, other: CaseResult) -> CaseResult:
        """The same test reported twice by one rank: keep the worse outcome, all texts."""
        worse = self if _SEVERITY[self.outcome] >= _SEVERITY[other.outcome] else other
        return dataclasses.replace(
            worse,
            text=join_texts(self.text, other.text),
            message=join_texts(self.message, other.message, sep="; "),
            time=self.time + other.time,
            system_out=join_texts(self.system_out, other.system_out),
            system_err=join_texts(self.system_err, other.system_err),
            properties=self.properties + other.properties,
        )


@dataclass(frozen=True, slots=True)
class JUnitFile:
    """One parsed JUnit file."""

    path: str
    rank: int | None
    """The file's own rank (testsuite property or file name); cases may override it."""
    world_size: int | None
    suite_names: tuple[str, ...]
    cases: tuple[CaseResult, ...]
    system_out: str = ""
    system_err: str = ""
    interrupted: str = ""
    """Why the run that wrote it ended before its last test ("" when it did not): its
    ``rankgate.interrupted`` property, or a nameless ``<testcase/>`` (pytest's record of
    a test that started and never ended)."""
    interrupted_tests: tuple[str, ...] = ()
    """The tests that were running then (``classname::name``), when known: one, or one
    per xdist worker."""
    shards: tuple[str, ...] = ()
    """A sharded run's merged file: one line per shard, where its job ran and how it ended
    (its ``shard`` properties, :mod:`rankgate.report.shard_merge`)."""
    run_id: str = ""
    """The in-place launch that wrote it (its ``rankgate.run_id``); "" when unknown."""
    stale_quarantine: tuple[str, ...] = ()
    """Quarantine entries that matched no test (its ``rankgate.quarantine_stale``
    properties, JSON objects; :mod:`rankgate.harness.quarantine`)."""

    @property
    def incomplete(self) -> str:
        """Why this file cannot stand for a finished run: interrupted, or no test in it."""
        if self.interrupted:
            return self.interrupted
        return "" if self.cases else NO_TEST


NO_TEST = "it holds no test: its selection ran none, or the run ended before any test did"
"""Why a JUnit file without a test is INCOMPLETE, never a pass: a marker or path that
selects nothing (pytest's exit 5) reads the same as a run that never got to a test."""


NAMELESS_CASE = "a test started and never ended (its <testcase/> has no name): the run was stopped"


def read_junit(path: str | Path) -> JUnitFile:
    """Parse one JUnit file (root ``<testsuites>`` or ``<testsuite>``)."""
    path = str(path)
    try:
        root = ET.parse(path).getroot()
    except FileNotFoundError:
        raise ReportInputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ReportInputError(f"{path}: is a directory") from None
    except ET.ParseError as exc:
        raise ReportInputError(f"{path}: not valid XML ({exc})") from None
    except OSError as exc:
        raise ReportInputError(f"{path}: cannot read ({exc.strerror})") from None
    if root.tag not in ("testsuites", "testsuite"):
        raise ReportInputError(
            f"{path}: not a JUnit file (root element <{root.tag}>, "
            "expected <testsuites> or <testsuite>)"
        )
    suites = list(root.iter("testsuite"))
    suite_props = [p for s in suites for p in _properties(s)]
    file_rank = _file_rank(path, suite_props)
    world = _int_prop(path, suite_props, "world_size")
    cases, nameless = [], False
    for suite in suites:
        for case in suite.findall("testcase"):
            if not case.get("name") and not case.get("classname"):
                nameless = True  # pytest's trace of a test cut short: no result in it
                continue
            cases.append(_read_case(path, case, file_rank))
    said = dict(suite_props)
    return JUnitFile(
        path=path,
        rank=file_rank,
        world_size=world,
        suite_names=tuple(dict.fromkeys(s.get("name", "") for s in suites)),
        cases=tuple(cases),
        system_out=join_texts(*(s.findtext("system-out") or "" for s in suites)),
        system_err=join_texts(*(s.findtext("system-err") or "" for s in suites)),
        interrupted=said.get(INTERRUPTED_PROPERTY, "") or (NAMELESS_CASE if nameless else ""),
        interrupted_tests=tuple(v for name, v in suite_props if name == INTERRUPTED_TEST_PROPERTY),
        shards=tuple(value for name, value in suite_props if name == "shard"),
        run_id=said.get(RUN_ID_PROPERTY, ""),
        stale_quarantine=tuple(v for name, v in suite_props if name == STALE_PROPERTY),
    )


def _read_case(path: str, case: ET.Element, file_rank: int | None) -> CaseResult:
    props = _properties(case)
    rank = _int_prop(path, props, "rank")
    outcome, messages, texts, result_type = "passed", [], [], ""
    for child in case:
        child_outcome = _child_outcome(child)
        if child_outcome is None:
            continue
        if _SEVERITY[child_outcome] > _SEVERITY[outcome]:
            outcome, result_type = child_outcome, child.get("type", "")
        messages.append(child.get("message", ""))
        texts.append(child.text or "")
    try:
        time = float(case.get("time", 0) or 0)
    except ValueError:
        time = 0.0
    return CaseResult(
        classname=case.get("classname", ""),
        name=case.get("name", ""),
        rank=file_rank if rank is None else rank,
        outcome=outcome,
        message=join_texts(*messages, sep="; "),
        text=join_texts(*texts),
        time=time,
        system_out=join_texts(*(e.text or "" for e in case.findall("system-out"))),
        system_err=join_texts(*(e.text or "" for e in case.findall("system-err"))),
        properties=tuple((k, v) for k, v in props if k != "rank"),
        source=path,
        result_type=result_type,
    )


def _properties(element: ET.Element) -> list[tuple[str, str]]:
    return [
        (p.get("name", ""), p.get("value", p.text or ""))
        for props in element.findall("properties")
        for p in props.findall("property")
    ]


def _int_prop(path: str, props: list[tuple[str, str]], name: str) -> int | None:
    values = {v.strip() for k, v in props if k == name}
    if not values:
        return None
    if len(values) > 1:
        raise ReportInputError(f"{path}: conflicting '{name}' properties {sorted(values)}")
    (value,) = values
    try:
        number = int(value)
    except ValueError:
        raise ReportInputError(f"{path}: property '{name}' is {value!r}, not an integer") from None
    if number < 0:
        raise ReportInputError(f"{path}: property '{name}' is negative ({number})")
    return number


def _file_rank(path: str, suite_props: list[tuple[str, str]]) -> int | None:
    from_prop = _int_prop(path, suite_props, "rank")
    match = _RANK_IN_NAME.search(Path(path).name)
    from_name = int(match.group(1)) if match else None
    if from_prop is not None and from_name is not None and from_prop != from_name:
        raise ReportInputError(
            f"{path}: its name says rank {from_name} but its 'rank' property says {from_prop}"
        )
    return from_prop if from_prop is not None else from_name


def join_texts(*parts: str, sep: str = "\n") -> str:
    """The non-empty parts, joined."""
    return sep.join(p for p in parts if p)
