"""What a rank whose test hung says of it, before it stops the run.

The ranks of one test time out together. Before it records the hang, a hung rank asks
the store what the test's other ranks left there (``ask_peers``): the failures of those
that failed it (their exchange results), where each hung rank waits (its stacks), what
those that finished it got, and each one's ledger. ``hang_texts`` words that as the
pool words a hang: the likely cause, every rank's outcome, the stacks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest

from rankgate.harness import divergence, verdict_lines
from rankgate.harness.inplace import control
from rankgate.harness.inplace.verdict import RankResult
from rankgate.harness.stacks import where as stack_where

WHERE_WAIT_S = 2.0
"""A hung rank waits this long for the other hung ranks to say where they wait (the
ranks of one test time out together), to name the likely cause."""


@dataclass(slots=True)
class HangAccount:
    """What the ranks of a hung test said of it, by global rank."""

    ledgers: dict[int, list | None]
    failed: dict[int, str] = field(default_factory=dict)
    """The ranks that failed it, with their failures' texts."""
    wheres: dict = field(default_factory=dict)
    """Where each hung rank waits (this one's first)."""
    finished: dict[int, str] = field(default_factory=dict)
    """The ranks that finished it and sent their result: their outcomes."""


def ask_peers(
    channel: control.ControlChannel,
    item: pytest.Item,
    stacks: str,
    *,
    key: int | str | None,
    ranks: Sequence[int],
    mine: list | None,
) -> HangAccount:
    """This rank's account of the hang (its ``stacks``, its ledger ``mine``) beside the
    other ``ranks``' (the store may be gone: ``alone`` then). ``key``: the test's attempt
    in store keys (None: outside the run's list, no results to read)."""
    rank = channel.rank
    told = HangAccount({rank: mine})
    if key is not None:
        for r in channel.failed_peers(key, ranks):
            sent = channel.peek(control.outcome_key(key, r))
            result = RankResult(*sent) if sent is not None else None
            told.failed[r] = result.text if result is not None else ""
            told.ledgers[r] = result.ledger if result is not None else None
    told.wheres = _where_hung_ranks_wait(channel, item, stacks, ranks, told)
    if key is not None:
        for r in ranks:
            if r == rank or r in told.failed or r in told.wheres:
                continue
            sent = channel.peek(control.outcome_key(key, r))
            if sent is not None:  # it waits in the exchange
                result = RankResult(*sent)
                told.finished[r], told.ledgers[r] = result.outcome, result.ledger
    return told


def alone(item: pytest.Item, stacks: str, rank: int, mine: list | None) -> HangAccount:
    """This rank's account of the hang only (the store is gone): where it waits."""
    return HangAccount({rank: mine}, wheres={rank: stack_where(stacks, str(item.path))})


def _where_hung_ranks_wait(
    channel: control.ControlChannel,
    item: pytest.Item,
    stacks: str,
    ranks: Sequence[int],
    told: HangAccount,
) -> dict:
    """Where this rank waits, and where the others that hung in this test say they do
    (the ranks that failed it are not waited for: they are not in it any more); their
    ledgers go into ``told`` (this rank's is there)."""
    rank = channel.rank
    key, ledger_key = f"where/{item.nodeid}/", f"ledger/{item.nodeid}/"
    mine = stack_where(stacks, str(item.path))
    channel.set(ledger_key + str(rank), told.ledgers.get(rank))
    channel.set(key + str(rank), mine)
    others = [key + str(r) for r in ranks if r != rank and r not in told.failed]
    deadline = time.monotonic() + WHERE_WAIT_S
    while time.monotonic() < deadline and not channel.store.check(others):
        time.sleep(0.05)
    wheres = {rank: mine}
    for r in ranks:
        if r != rank and channel.store.check([key + str(r)]):
            wheres[r] = channel.peek(key + str(r))
            told.ledgers[r] = channel.peek(ledger_key + str(r))  # set before its where
    return wheres


def hang_texts(
    told: HangAccount, rank: int, why: str, stacks: str, hint: Callable[[bool], str]
) -> tuple[str, str | None]:
    """This rank's record of the hang (its JUnit's: its own outcome), and what the
    terminal shows instead when other ranks have a part in it (None: the same).
    ``hint(waits)``: a hint for a test that waits in a collective (``waits``) or not."""
    wheres = told.wheres
    notes = {"hung": f"{why}; the rank exited"}
    diverged = divergence.find(
        told.ledgers, now={r: str(w) for r, w in wheres.items() if w and w.collective is None}
    )
    if diverged is not None:  # the ledgers name the cause; the stacks only where ranks wait
        cause = divergence.cause_of(diverged, told.ledgers)
        table = divergence.side_by_side(told.ledgers, diverged) + "\n"
    else:
        cause, table = verdict_lines.hang_cause(wheres), ""
    headline = verdict_lines.with_cause(
        verdict_lines.outcomes_line({rank: "hung"}, notes=notes), cause
    )
    said = hint(wheres.get(rank) is not None and wheres[rank].collective is not None)
    if said:  # a plain test on one rank waits for ranks that never join it
        headline = f"{headline}; {said}"
    own_body = f"{table}Python stacks of every thread:\n{stacks}"
    if not (told.failed or len(wheres) > 1 or told.finished):
        return f"{headline}\n{own_body}", None
    # The terminal names every rank's outcome, as the pool does: the peers that failed
    # (first, with their texts), every rank that said it hangs here, and those that
    # finished it (a rank the ledgers single out "diverged", never passed).
    outcomes = {**told.finished, **dict.fromkeys(told.failed, "failed")}
    outcomes = divergence.worded({**outcomes, **dict.fromkeys(wheres, "hung")}, diverged)
    sections = [f"--- rank {r}: failed ---\n{text}" for r, text in told.failed.items()]
    sections.append(f"--- rank {rank}: hung ---\n{own_body}" if told.failed else own_body)
    exited = "the ranks exited" if len(wheres) > 1 else "the rank exited"
    line = verdict_lines.with_cause(
        verdict_lines.outcomes_line(outcomes, notes={"hung": f"{why}; {exited}"}), cause
    )
    return f"{headline}\n{own_body}", "\n".join([line, *sections])
