"""What a rank whose test hung says of it, before it stops the run.

The ranks of one test time out together. A hung rank stops the run in the store, then
asks it what the test's other ranks left there (``ask_peers``): the failures of those
that failed it (their exchange results), where each hung rank waits (its stacks), what
those that finished it got, and each one's ledger. ``hang_texts`` words that as the
pool words a hang: the likely cause, every rank's outcome, the stacks.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from rankgate.harness import divergence, ledger_waits, verdict_lines
from rankgate.harness.inplace import control
from rankgate.harness.inplace.hangwatch import PEER_GRACE_S
from rankgate.harness.inplace.verdict import RankResult
from rankgate.harness.stacks import where as stack_where

WHERE_WAIT_S = PEER_GRACE_S + 2.0
"""A hung rank waits this long for the other hung ranks to say where they wait, to name
the likely cause: a rank whose test began later stops PEER_GRACE_S after this one
stopped the run (hangwatch), then answers."""


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


def describe(
    channel: control.ControlChannel,
    item: pytest.Item,
    stacks: str,
    why: str,
    *,
    reason: str,
    key: int | str | None,
    ranks: Sequence[int],
    mine: list | None,
    hints: tuple[str, str],
) -> tuple[str, str | None]:
    """Stop the run for ``reason``, ask the other ``ranks`` (``ask_peers``; only this
    rank's own account when the store is gone), and word the hang (``hang_texts``)."""
    try:
        told = ask_peers(channel, item, stacks, reason=reason, key=key, ranks=ranks, mine=mine)
    except Exception:  # the store is gone: name where this rank waits only
        told = HangAccount(
            {channel.rank: mine}, wheres={channel.rank: stack_where(stacks, str(item.path))}
        )
    return hang_texts(told, channel.rank, why, stacks, hints)


def ask_peers(
    channel: control.ControlChannel,
    item: pytest.Item,
    stacks: str,
    *,
    reason: str,
    key: int | str | None,
    ranks: Sequence[int],
    mine: list | None,
) -> HangAccount:
    """Stop the run for ``reason``; this rank's account of the hang (its ``stacks``, its
    ledger ``mine``) beside the other ``ranks``': the failed ones' texts, where each hung
    one waits (the failed ones are not waited for: they are not in it any more), the
    finished ones' outcomes, every one's ledger. ``key``: the test's attempt in store
    keys (None: outside the run's list, no results to read)."""
    rank = channel.rank
    channel.abort(reason)
    told = HangAccount({rank: mine})
    for r in channel.failed_peers(key, ranks) if key is not None else ():
        sent = channel.peek(control.outcome_key(key, r))
        result = RankResult(*sent) if sent is not None else None
        told.failed[r] = result.text if result is not None else ""
        told.ledgers[r] = result.ledger if result is not None else None
    where_key, ledger_key = f"where/{item.nodeid}/", f"ledger/{item.nodeid}/"
    told.wheres = {rank: stack_where(stacks, str(item.path))}
    channel.set(ledger_key + str(rank), mine)
    channel.set(where_key + str(rank), told.wheres[rank])
    others = [where_key + str(r) for r in ranks if r != rank and r not in told.failed]
    deadline = time.monotonic() + WHERE_WAIT_S
    while time.monotonic() < deadline and not channel.store.check(others):
        time.sleep(0.05)
    for r in ranks:
        if r != rank and channel.store.check([where_key + str(r)]):
            told.wheres[r] = channel.peek(where_key + str(r))
            told.ledgers[r] = channel.peek(ledger_key + str(r))  # set before its where
    told.wheres = ledger_waits.waits_per_ledger(told.wheres, told.ledgers)
    for r in ranks if key is not None else ():
        if r == rank or r in told.failed or r in told.wheres:
            continue
        sent = channel.peek(control.outcome_key(key, r))
        if sent is not None:  # it waits in the exchange
            result = RankResult(*sent)
            told.finished[r], told.ledgers[r] = result.outcome, result.ledger
    return told


def hang_texts(
    told: HangAccount, rank: int, why: str, stacks: str, hints: tuple[str, str]
) -> tuple[str, str | None]:
    """This rank's record of the hang (its JUnit's: its own outcome), and what the
    terminal shows instead when other ranks have a part in it (None: the same).
    ``hints``: for a test that does not wait in a collective, and for one that does."""
    wheres, ledgers = told.wheres, told.ledgers
    others = bool(told.failed or len(wheres) > 1 or told.finished)
    diverged = divergence.find(
        ledgers, now={r: str(w) for r, w in wheres.items() if w and w.collective is None}
    )
    # The ledgers name the cause where they part; the stacks only where ranks wait.
    cause = divergence.cause_of(diverged, ledgers) if diverged is not None else None
    table = divergence.side_by_side(ledgers, diverged) + "\n" if diverged is not None else ""
    # The terminal names every rank's outcome, as the pool does: the peers that failed,
    # every rank that said it hangs here, and those that finished it (a rank the ledgers
    # single out "diverged", never passed).
    outcomes = {
        **told.finished,
        **dict.fromkeys(told.failed, "failed"),
        **dict.fromkeys(wheres, "hung"),
    }
    outcomes = divergence.worded(outcomes, diverged) if others else outcomes
    cause = verdict_lines.hang_cause(wheres) if cause is None else cause
    notes = {"hung": f"{why}; the rank exited"}
    headline = verdict_lines.with_cause(
        verdict_lines.outcomes_line({rank: "hung"}, notes=notes), cause
    )
    hint = hints[wheres.get(rank) is not None and wheres[rank].collective is not None]
    if hint:  # a plain test on one rank waits for ranks that never join it
        headline = f"{headline}; {hint}"
    own_body = f"{table}Python stacks of every thread:\n{stacks}"
    if not others:
        return f"{headline}\n{own_body}", None
    sections = [f"--- rank {r}: failed ---\n{text}" for r, text in told.failed.items()]
    sections.append(f"--- rank {rank}: hung ---\n{own_body}" if told.failed else own_body)
    exited = "the ranks exited" if len(wheres) > 1 else "the rank exited"
    line = verdict_lines.with_cause(
        verdict_lines.outcomes_line(outcomes, notes={"hung": f"{why}; {exited}"}), cause
    )
    return f"{headline}\n{own_body}", "\n".join([line, *sections])
