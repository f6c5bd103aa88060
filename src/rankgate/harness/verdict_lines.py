"""How every report words ranks: the pool, in place, merge-junit, the report and JUnit.

One vocabulary, root cause first::

    rank 1 failed; ranks 0, 2 passed
    ranks 0, 1 failed (rank 1 first); rank 2 passed
    ranks 0, 1 hung; likely cause: rank 1 in user code at utils.py:418; rank 0 waiting
        in all_gather_object at utils.py:419   (one line)

Outcome groups come in ORDER (the likeliest cause first); within a group the ranks
are sorted. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from rankgate.harness.stacks import Where

ORDER = (
    "crashed",
    "diverged",
    "failed",
    "error",
    "hung",
    "interrupted",
    "missing",
    "not run",
    "xpassed",
    "xfailed",
    "skipped",
    "passed",
)
"""Outcomes, likeliest root cause first; any other word sorts after them. "diverged": a
rank whose body returned but whose ledger shows it skipped or changed a collective its
peers issued (``divergence.worded``): never "passed"."""

XPASS_STRICT_PREFIX = "[XPASS(strict)] "
"""How pytest's failure of a strict xfail test that passed begins."""

UNEXPECTED_SUCCESS = "Unexpected success"
"""How pytest's failure of a unittest ``expectedFailure`` test that passed begins: the
same strict pass under another name."""


def is_strict_xpass(failure_text: str) -> bool:
    """Whether a failure's text says only that an expected failure passed."""
    text = failure_text.removeprefix("Failed: ")  # JUnit's message names the exception
    return text.startswith((XPASS_STRICT_PREFIX, UNEXPECTED_SUCCESS))


NOT_RUN_PREFIX = "not run: "
"""How the report of a test a stopped in-place run never started begins (merge-junit
reads it back as the outcome ``not run``)."""

INTERRUPTED_PREFIX = "interrupted: "
"""How the failure of the test a signal stopped begins (merge-junit words that rank's
outcome ``interrupted``)."""
INTERRUPTED_PROPERTY = "rankgate.interrupted"
"""A JUnit file's testsuite property, set when a signal (SIGINT, SIGTERM, SIGHUP) or
``pytest.exit`` ended the run before its last test: its value says why and where.
merge-junit and the report read such a file as an incomplete run, never a pass."""
INTERRUPTED_TEST_PROPERTY = "rankgate.interrupted_test"
"""Beside INTERRUPTED_PROPERTY: the test that was running (``classname::name``), recorded
as failed; absent when the signal came between tests."""

NODE_ID_PROPERTY = "rankgate.nodeid"
"""A case's pytest node id (``path/to/test_x.py::Class::test``), which in-place ranks
record: JUnit's classname mangles the path into dots and cannot be read back."""

OUTCOME_PROPERTY = "rankgate.outcome"
"""A case's outcome on an in-place rank where its JUnit element cannot say it: a pass
under a non-strict xfail marker ("xpassed"), which pytest's JUnit writes as a plain pass.
merge-junit reads it, so a rank's ``pytest.xfail()`` beside plain passes is a
disagreement, and an xfail-marked test's pass beside another rank's xfail one failure."""

WORLD_PROPERTY = "rankgate.world"
"""A world test's number of ranks, in the pool's JUnit and in every in-place rank's."""

BACKEND_PROPERTY = "rankgate.backend"
"""The backend a world test's body ran on (``gloo``, ``cpu:gloo,cuda:nccl``), the same."""

RANKS_PROPERTY = "rankgate.ranks"
"""The global ranks that ran a case in place ("2,3": a sub-world's, "1": a plain test's
one rank): merge-junit merges the case from those ranks' files only."""


def count(n: int, noun: str) -> str:
    """'1 rank', '2 ranks', '1 test', '0 tests' (the nouns this vocabulary counts)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def ranks(numbers: Iterable[int]) -> str:
    """'rank 1' or 'ranks 0, 2'."""
    numbers = sorted(numbers)
    return ("rank " if len(numbers) == 1 else "ranks ") + ", ".join(map(str, numbers))


def _rank_of_outcome(outcome: str) -> tuple[int, str]:
    return (ORDER.index(outcome) if outcome in ORDER else len(ORDER), outcome)


def outcomes_line(
    outcomes: Mapping[int, str],
    *,
    first: int | None = None,
    notes: Mapping[str, str] | None = None,
) -> str:
    """'rank 1 failed; ranks 0, 2 passed' from {rank: outcome}.

    ``first``: the rank that failed first, named when several failed and none crashed
    or hung: a rank that did came first, and its peers' failures follow from it in an
    order their timing alone decides. ``notes``: text in brackets after an outcome's
    group (how a crashed rank died).
    """
    if any(str(o) in ("crashed", "hung") for o in outcomes.values()):
        first = None
    groups: dict[str, list[int]] = {}
    for rank, outcome in outcomes.items():
        groups.setdefault(str(outcome), []).append(rank)
    parts = []
    for outcome in sorted(groups, key=_rank_of_outcome):
        members = groups[outcome]
        extra = []
        if first is not None and first in members and len(members) > 1:
            extra.append(f"rank {first} first")
        if notes and notes.get(outcome):
            extra.append(notes[outcome])
        part = f"{ranks(members)} {outcome}"
        parts.append(part + (f" ({'; '.join(extra)})" if extra else ""))
    return "; ".join(parts)


def hang_cause(wheres: Mapping[int, Where | None]) -> str:
    """'likely cause: rank 1 in user code at u.py:418; rank 0 waiting in barrier at u.py:419'.

    Ranks outside every collective come first: one of them usually holds the others.
    Empty when no rank's stack could be read.
    """
    known = {r: w for r, w in wheres.items() if w is not None}
    if not known:
        return ""
    outside = sorted(r for r, w in known.items() if w.collective is None)
    inside = sorted(r for r in known if r not in outside)
    described = "; ".join(f"rank {r} {known[r]}" for r in outside + inside)
    if outside:
        return f"likely cause: {described}"
    return f"every hung rank waits in a collective: {described}"


UNDECIDED = "the ledgers cannot tell which rank is wrong: "
"""Before a divergence that singles out no rank (two ranks, two different calls)."""


def ledger_cause(divergence_text: str, *, decided: bool = True) -> str:
    """'likely cause: rank 1 never issued all_reduce #2 ...': the ledgers' divergence;
    not ``decided`` (it singles out no rank), said so instead of a likely cause."""
    return f"{'likely cause: ' if decided else UNDECIDED}{divergence_text}"


def left_running_cause(left: Mapping[int, str]) -> str:
    """'rank 1 left processes running: pid 123 (sleep 1000)' from {rank: the processes
    its test left running ('' for none)}: the failure's cause, said in the headline."""
    return "; ".join(
        f"rank {r} left processes running: {names}" for r, names in sorted(left.items()) if names
    )


AFTER_TEST = "rankgate: the test "
"""How the failure of what a test left behind begins (``rankgate.harness.aftertest``)."""
_NAMED_AFTER_TEST = re.compile(re.escape(AFTER_TEST) + r"(replaced |left \d+ threads? running)")


def after_test_cause(texts: Mapping[int, str]) -> str:
    """ "ranks 0, 1 left 1 thread running: 'w' (started at t.py:7 in test_x)" from {rank:
    its failure text}: the threads a test left running and the torch.distributed functions
    it replaced, said in the headline as processes left running are ('' when none)."""
    said: dict[str, list[int]] = {}
    for rank, text in sorted(texts.items()):
        for line in text.splitlines():
            if _NAMED_AFTER_TEST.match(line):
                phrase = line[len(AFTER_TEST) :].split(". ", 1)[0]
                if rank not in said.setdefault(phrase, []):
                    said[phrase].append(rank)
    return "; ".join(f"{ranks(members)} {phrase}" for phrase, members in said.items())


_PEERS_CRASHED = re.compile(r"^ranks? \d[\d, ]* crashed \(ended without a result")
_OWN_RESULT = re.compile(r"^rank (\d+)'s own result before that: (\w+)$", re.MULTILINE)


def own_result_before_peers_crashed(message: str, text: str, rank: int) -> str:
    """A rank's own outcome of a test its peers died in ("passed"), from the record an
    in-place rank writes when they do (its message "rank 1 crashed (ended without a
    result ...)", its text "rank 0's own result before that: passed"); "" for any other
    record. merge-junit words that rank by it, as the pool does ("rank 0 passed")."""
    if not _PEERS_CRASHED.match(message):
        return ""
    for said_rank, outcome in _OWN_RESULT.findall(text):
        if int(said_rank) == rank:
            return outcome
    return ""


_CAUSES = ("likely cause: ", "every hung rank waits in a collective: ", UNDECIDED)
_HUNG_HEADLINE = re.compile(r"^rank \d+ hung( \(|;|$)")


def hung_headline(message: str) -> bool:
    """Whether a rank's failure message is an in-place hang's ("rank 1 hung (...)")."""
    return bool(_HUNG_HEADLINE.match(message))


def cause_in(message: str) -> str:
    """The hang's likely cause a rank's message carries ('' when none)."""
    first_line = message.split("\n", 1)[0]
    starts = [first_line.find(c) for c in _CAUSES if c in first_line]
    return first_line[min(starts) :] if starts else ""


def with_cause(line: str, cause: str) -> str:
    """The outcomes line followed by the hang's likely cause, when there is one."""
    return f"{line}; {cause}" if cause else line


FIRST_MARGIN_S = 0.5
"""A failing rank counts as first only this much ahead of the next: closer is noise. A
peer's failure that follows from another's comes a collective's timeout later, seconds;
two ranks that each left a thread running came more than 50 ms apart under a loaded
2-core machine's `-n 3` (both failed the same way; one read as first)."""


def first_failed(durations: Mapping[int, float]) -> int | None:
    """The failing rank whose failure came clearly before the others' (None: no such rank).

    ``durations``: seconds from the test's start to each failing rank's end.
    """
    if len(durations) < 2:
        return None
    first, second = sorted(durations.items(), key=lambda kv: (kv[1], kv[0]))[:2]
    return first[0] if second[1] - first[1] >= FIRST_MARGIN_S else None


def xfailed_as_one(outcomes: Mapping[int, str]) -> bool:
    """Whether an xfail-marked test's rank outcomes make one expected failure: some rank
    failed it (xfailed) and every other passed it (xpassed). Its body ran on every rank,
    so it failed as a whole, as the pool counts it: a pass on one rank does not make it
    an unexpected pass."""
    kinds = set(outcomes.values())
    return "xfailed" in kinds and kinds <= {"xfailed", "xpassed"}
