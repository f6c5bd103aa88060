"""What the ledgers say of ranks a hang or a crash stopped mid-collective: a hung rank
whose stack cannot see the call it waits in (a ProcessGroup ``Work.wait()`` is C++), and
the words for where the survivors of a crash were. The divergence between ranks that
finished is :mod:`rankgate.harness.divergence`'s."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import PurePath

from rankgate.harness.divergence import describe, in_flight


def waits_per_ledger(wheres: Mapping[int, object], ledgers) -> dict[int, object]:
    """Where hung ranks wait (``stacks.Where`` by rank), where a rank's stack says "in user
    code" at the very line of a collective its ledger holds unfinished: it waits in that
    call (a ProcessGroup call's ``Work.wait()`` is C++, with no torch.distributed frame),
    so a rank that only waits is never named before one outside every collective."""
    out = dict(wheres)
    for rank, where in wheres.items():
        frame = getattr(where, "frame", None)
        if frame is None or where.collective is not None:
            continue
        entry = in_flight((ledgers or {}).get(rank))
        if (
            entry is not None
            and entry.get("state") == "issued"
            and entry.get("line") == frame.line
            and PurePath(entry.get("file") or "").name == PurePath(frame.file).name
        ):
            out[rank] = replace(where, collective=entry["op"])
    return out


def under_crash(crashed: Mapping[int, str], ledgers: Mapping[int, Sequence[Mapping] | None]) -> str:
    """'rank 0 crashed in all_reduce at x.py:29; rank 1 was in all_reduce #1 (float64[4])
    issued at x.py:29': where the ranks that died (no ledger left) were, from their stacks
    (``crashed``: rank -> 'in all_reduce at x.py:29', or ''), and the collective their
    peers were in. '' when no peer was in one."""
    waiting = {r: e for r, entries in sorted(ledgers.items()) if (e := in_flight(entries))}
    if not waiting or not crashed:
        return ""
    died = "; ".join(
        f"rank {r} crashed{' ' + where if where else ''}" for r, where in sorted(crashed.items())
    )
    peers = "; ".join(f"rank {r} was in {describe(e)}" for r, e in waiting.items())
    return f"{died}; {peers}"
