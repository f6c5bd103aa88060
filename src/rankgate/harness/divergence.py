"""The first collective where the ranks' ledgers diverge, worded for a verdict.

Reads the records of :func:`rankgate.harness.ledger.snapshot` (one list per rank) and
says, one line::

    rank 1 never issued all_reduce #2 (float32[4]) that rank 0 issued at test_x.py:12;
        rank 1's last: broadcast #1 at test_x.py:10
    rank 1 never issued all_reduce #2 (float32[4]) that rank 0 issued at test_x.py:12;
        rank 1 issued barrier #2 at test_x.py:15 instead
    ranks disagree at #2: rank 1 issued float64[4] where ranks 0, 2 issued float32[4]
        (all_reduce #2 at x.py:43)
    ranks disagree at #5: rank 0 issued all_reduce float32[4] at x.py:12, rank 1 issued
        broadcast float32[4] at x.py:14 (#5)
    rank 1 destroyed the default process group at test_x.py:11; rank 0 was in
        all_reduce #2 (float32[4]) issued at test_x.py:13

A destroy of the default group comes first: the harness fails the test for it, and
every collective a peer issues on the group after it waits or fails.

Two ranks that issued different collectives under one number either disagree (the
calls sit in the two branches of one ``if``, or in different files) or one of them
skipped the call the other made first: then the rank whose call comes later in the
file is named. Standard library only: merge-junit and the report read ledgers too.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath

from rankgate.harness.verdict_lines import ledger_cause
from rankgate.harness.verdict_lines import ranks as ranks_word

WORLD = "world"
"""The name a ledger gives the default process group."""
P2P_PREFIX = "p2p:"
"""Before the group's name, in a point-to-point call's entry: never compared."""
DESTROY = "destroy_process_group"
"""The op of a ledger's entry for the test's destroy of the default group (ledger.DESTROY)."""
UNKNOWN = "unknown"
"""The name of a group the ledger could not describe (destroyed before it was read)."""


@dataclass(frozen=True, slots=True)
class Divergence:
    text: str
    """One line, as above."""
    cause: tuple[int, ...]
    """The ranks the ledgers single out (empty when they only show a disagreement)."""
    group: str
    seq: int
    order: tuple[int, int] = field(default=(0, 0), compare=False)
    """Where it happened in the ledgers (which divergence of several came first)."""
    ranks: tuple[int, ...] = field(default=(), compare=False)
    """The ranks whose calls it compares (those of a disagreement)."""


def find(
    ledgers: Mapping[int, Sequence[Mapping] | None], now: Mapping[int, str] | None = None
) -> Divergence | None:
    """The first divergence among the ranks' ledgers; None when they agree, or when
    fewer than two ranks have one (a rank without a ledger is left out).

    ``now``: where a hung rank's stack says it is ('in user code at x.py:16'), said of
    a rank that never issued the collective."""
    known = {int(r): list(entries) for r, entries in ledgers.items() if entries is not None}
    destroyed = _destroyed(known)
    if destroyed is not None:
        return destroyed
    if len(known) < 2:
        return None
    by_group: dict[str, dict[int, dict[int, Mapping]]] = {}
    members: dict[str, tuple[int, ...]] = {}
    for rank, entries in known.items():
        for index, entry in enumerate(entries):
            group = entry["group"]
            if group.startswith(P2P_PREFIX) or entry["op"] == DESTROY:
                continue  # point-to-point sequences differ by rank by design
            indexed = {**entry, "_index": index}  # its place in this rank's ledger
            by_group.setdefault(group, {}).setdefault(rank, {})[entry["seq"]] = indexed
            members.setdefault(group, tuple(entry.get("ranks") or ()))
    found = []
    for group, seqs in by_group.items():
        ranks = [r for r in (members[group] or sorted(seqs)) if r in known]
        divergence = _first_in_group(group, ranks, seqs, known, now or {})
        if divergence is not None:
            found.append(divergence)
    # A rank that only waits is never the cause: one blamed in one group but waiting in
    # another group's collective that others never issued is their victim.
    waits_in = {r: e["group"] for r, entries in known.items() if (e := in_flight(entries))}
    blocked = {
        r
        for d in found
        for r in d.cause
        if any(o is not d and o.group == waits_in.get(r) and r not in o.cause for o in found)
    }
    clear = [d for d in found if not blocked & set(d.cause)]
    return min(clear or found, key=lambda d: d.order) if found else None


def _first_in_group(group, ranks, seqs, ledgers, now) -> Divergence | None:
    seqs = {r: seqs.get(r, {}) for r in ranks}
    last = {r: max(s, default=0) for r, s in seqs.items()}
    top = max(last.values(), default=0)
    # A full ledger dropped its oldest entries: compare from where every rank has them.
    start = max((min(s) for s in seqs.values() if s), default=1)
    skipped_at = None  # the first number the ranks issued from different, ordered lines
    for seq in range(start, top + 1):
        here = {r: seqs[r][seq] for r in ranks if seq in seqs[r]}
        missing = [r for r in ranks if r not in here and seq > last[r]]
        if not here:
            continue
        if missing:
            if skipped_at is not None:
                return skipped_at
            return _never_issued(seq, here, missing, ledgers, now)
        kinds = {_kind(e) for e in here.values()}
        if len(kinds) > 1:
            return _differ(seq, here)
        if skipped_at is None and len({_site(e) for e in here.values()}) > 1:
            skipped_at = _skipped(seq, here)
    return None


def _destroyed(ledgers: Mapping[int, list]) -> Divergence | None:
    """The ranks whose test destroyed the default group and issued nothing on a new one
    after it, and where their peers were; None when no rank did."""
    destroys = {}
    for rank, entries in sorted(ledgers.items()):
        for index, entry in enumerate(entries):
            if entry["op"] == DESTROY:
                destroys[rank] = {**entry, "_index": index}
            elif entry["group"] == WORLD and rank in destroys:
                del destroys[rank]  # a default group made after it was used: not the cause
    if not destroys:
        return None
    by_site: dict[str, list[int]] = {}
    for rank, entry in destroys.items():
        by_site.setdefault(_site(entry), []).append(rank)
    parts = [
        f"{ranks_word(rs)} destroyed the default process group at {site}"
        for site, rs in by_site.items()
    ]
    for rank, entries in sorted(ledgers.items()):
        waiting = None if rank in destroys else in_flight(entries)
        if waiting is not None:
            parts.append(f"rank {rank} was in {describe(waiting)}")
    first = min(destroys.values(), key=lambda e: e["_index"])
    return Divergence("; ".join(parts), tuple(destroys), WORLD, first["seq"], _order(destroys))


def _never_issued(seq, here, missing, ledgers, now) -> Divergence | None:
    issuers = sorted(here)
    ref = here[issuers[0]]
    # A rank whose ledger holds this very call under a group it could not name (read
    # after the group was gone) did issue it: claim nothing its own entry contradicts.
    missing = [r for r in missing if not _holds(ledgers[r], ref)]
    if not missing:
        return None
    elsewhere = _on_another_group(ref, missing, ledgers)
    if elsewhere is not None:
        return elsewhere
    lasts = []
    for r in missing:
        entries = ledgers[r]
        if entries:
            lasts.append(f"rank {r}'s last: {name(entries[-1])} at {_site(entries[-1])}")
        else:
            lasts.append(f"rank {r} issued no collective")
        if now.get(r):
            lasts[-1] += f" (now {now[r]})"
    text = (
        f"{ranks_word(missing)} never issued {name(ref)}{_arg(ref)} that "
        f"{ranks_word(issuers)} issued at {_site(ref)}; " + "; ".join(lasts)
    )
    return Divergence(text, tuple(missing), ref["group"], seq, _order(here))


def _on_another_group(ref: Mapping, missing: list[int], ledgers) -> Divergence | None:
    """The ranks ``missing`` from ``ref``'s group each wait in the same call (op and line)
    on another group: the ranks disagree on the group, as on a dtype, and the ledgers
    cannot tell which is wrong. None when any of them is elsewhere."""
    waits = {r: in_flight(ledgers[r]) for r in missing}
    if not all(
        e is not None
        and e["op"] == ref["op"]
        and _site(e) == _site(ref)
        and e["group"] != ref["group"]
        for e in waits.values()
    ):
        return None
    by_group: dict[str, list[int]] = {}
    for r, e in waits.items():
        by_group.setdefault(_on(e) or " on the default group", []).append(r)
    issuers = sorted(r for r, entries in ledgers.items() if _holds(entries, ref) and r not in waits)
    parts = [f"{ranks_word(issuers)} issued it{_on(ref) or ' on the default group'}"]
    parts += [f"{ranks_word(rs)} issued it{on}" for on, rs in by_group.items()]
    text = f"ranks disagree on the group of {ref['op']} at {_site(ref)}: " + ", ".join(parts)
    ranks = tuple(sorted((*issuers, *waits)))
    return Divergence(
        text, (), ref["group"], ref["seq"], (ref["_index"], ref.get("line", 0)), ranks
    )


def _holds(entries: Sequence[Mapping], ref: Mapping) -> bool:
    """Whether ``entries`` hold ``ref``'s call (its op, number and line) under a group
    that may be ``ref``'s: the same, or one that was not named."""
    return any(
        e["op"] == ref["op"]
        and e["seq"] == ref["seq"]
        and _site(e) == _site(ref)
        and (e["group"] == ref["group"] or e["group"] == UNKNOWN or not e.get("ranks"))
        for e in entries
    )


def _skipped(seq, here) -> Divergence | None:
    """Same collective, different lines: if one line comes first in the file (not the
    other branch of its ``if``), the ranks at the later line skipped it."""
    first = min(here.values(), key=lambda e: e.get("line", 0))
    later = {r: e for r, e in here.items() if _site(e) != _site(first)}
    if not later or not all(_before(first, e) for e in later.values()):
        return None
    issuers = sorted(r for r in here if r not in later)
    instead = "; ".join(
        f"rank {r} issued {name(e)} at {_site(e)} instead" for r, e in later.items()
    )
    text = (
        f"{ranks_word(later)} never issued {name(first)}{_arg(first)} that "
        f"{ranks_word(issuers)} issued at {_site(first)}; {instead}"
    )
    return Divergence(text, tuple(sorted(later)), first["group"], seq, _order(here))


def _differ(seq, here) -> Divergence:
    skipped = _skipped(seq, here)
    if skipped is not None:
        return skipped
    kinds: dict[tuple, list[int]] = {}
    for r, e in sorted(here.items()):
        kinds.setdefault(_kind(e), []).append(r)
    sizes = sorted(len(rs) for rs in kinds.values())
    # One kind held by fewer ranks than every other: those ranks are the odd ones out.
    cause: tuple[int, ...] = ()
    if len(sizes) > 1 and sizes[0] < sizes[1]:
        cause = tuple(next(rs for rs in kinds.values() if len(rs) == sizes[0]))
    firsts = {kind: here[rs[0]] for kind, rs in kinds.items()}  # each kind's lowest rank
    ops = {e["op"] for e in firsts.values()}
    sites = {_site(e) for e in here.values()}
    said = {
        kind: _what_differs(e, firsts.values()) + (f" at {_site(e)}" if len(sites) > 1 else "")
        for kind, e in firsts.items()
    }
    if cause:
        odd = _kind(here[cause[0]])
        rest = " and ".join(
            f"{ranks_word(rs)} issued {said[k]}" for k, rs in kinds.items() if k != odd
        )
        parts = f"{ranks_word(cause)} issued {said[odd]} where {rest}"
    else:
        parts = ", ".join(f"{ranks_word(rs)} issued {said[k]}" for k, rs in kinds.items())
    any_entry = next(iter(here.values()))
    call = f"{any_entry['op']} #{seq}" if len(ops) == 1 else f"#{seq}"
    context = f"{call} at {sites.pop()}" if len(sites) == 1 else (call if len(ops) == 1 else "")
    return Divergence(
        f"ranks disagree at #{seq}{_on(any_entry)}: {parts}" + (f" ({context})" if context else ""),
        cause,
        any_entry["group"],
        seq,
        _order(here),
        tuple(sorted(here)),
    )


def _kind(entry: Mapping) -> tuple[str, str, str, str]:
    """What the ranks must agree on in one collective: the op, its tensor's dtype and
    shape, its reduce op and its root."""
    return entry["op"], entry.get("arg", ""), entry.get("reduce", ""), entry.get("root", "")


def _what_differs(entry: Mapping, kinds) -> str:
    """'float64[4]', 'ReduceOp.MAX', 'broadcast float32[4]': the parts of ``entry``'s
    call that differ among ``kinds`` (the op with its tensor, when the ops differ)."""
    kinds = list(kinds)
    if len({k["op"] for k in kinds}) > 1:
        return " ".join(filter(None, (entry["op"], entry.get("arg", ""))))
    parts = []
    if len({k.get("reduce", "") for k in kinds}) > 1:
        parts.append(f"ReduceOp.{entry.get('reduce') or 'none'}")
    if len({k.get("arg", "") for k in kinds}) > 1:
        parts.append(entry.get("arg") or "no tensor")
    if len({k.get("root", "") for k in kinds}) > 1:
        parts.append(entry.get("root") or "no root")
    return " ".join(parts)


def _order(here) -> tuple[int, int]:
    """The earliest place in a rank's ledger, then the earliest line (a tie)."""
    return min((e["_index"], e.get("line", 0)) for e in here.values())


DIVERGED = "diverged"
"""How a verdict words a rank that passed but whose ledger the divergence names."""


def worded(outcomes: Mapping[int, str], diverged: Divergence | None) -> dict[int, str]:
    """The ranks' outcomes as every verdict words them: a rank whose body returned
    ("passed") but which the ledgers single out (it skipped or changed a collective), or
    which is in a disagreement that singles out no rank, "diverged"."""
    named = () if diverged is None else (diverged.cause or diverged.ranks)
    return {r: DIVERGED if r in named and o == "passed" else o for r, o in outcomes.items()}


def cause_of(
    diverged: Divergence, ledgers: Mapping[int, Sequence[Mapping] | None] | None = None
) -> str:
    """The verdict's cause from ``diverged``: 'likely cause: ...' when it singles out
    ranks; else it says the ledgers cannot tell, and where each rank waits (``ledgers``)."""
    if diverged.cause:
        return ledger_cause(diverged.text)
    waits = [
        f"rank {r} {'was' if e.get('state') == 'failed' else 'waits'} in {describe(e)}"
        for r, entries in sorted((ledgers or {}).items())
        if (e := in_flight(entries)) is not None
    ]
    return ledger_cause("; ".join([diverged.text, *waits]), decided=False)


def name(entry: Mapping) -> str:
    """'all_reduce #2', 'all_reduce #1 on ranks [0, 2]'."""
    return f"{entry['op']} #{entry['seq']}{_on(entry)}"


def _on(entry: Mapping) -> str:
    group = entry.get("group", "").removeprefix(P2P_PREFIX)
    if group == WORLD:
        return ""
    if not entry.get("ranks"):  # torch.distributed does not know it (torch's newer API)
        return f" on group {group!r}" if group != UNKNOWN else " on a group of unknown ranks"
    return f" on ranks {list(entry['ranks'])}"


def _arg(entry: Mapping) -> str:
    return f" ({entry['arg']})" if entry.get("arg") else ""


def _site(entry: Mapping) -> str:
    if not entry.get("file"):
        return "an unknown place"
    return f"{PurePath(entry['file']).name}:{entry['line']}"


def _before(a: Mapping, b: Mapping) -> bool:
    """Whether ``a``'s call comes before ``b``'s in one file, on a path that runs
    both (not the two branches of one ``if``)."""
    if a.get("file") != b.get("file") or not a.get("file") or a["line"] >= b["line"]:
        return False
    branches = _branches(a["file"])
    if branches is None:
        return False  # the source cannot be read here: claim no order
    return not any(
        (lo1 <= a["line"] <= hi1 and lo2 <= b["line"] <= hi2) for lo1, hi1, lo2, hi2 in branches
    )


@functools.lru_cache(maxsize=64)
def _branches(path: str) -> tuple[tuple[int, int, int, int], ...] | None:
    """(body start, body end, else start, else end) of every ``if`` with an ``else``."""
    try:
        tree = ast.parse(open(path, encoding="utf-8").read(), path)  # noqa: SIM115
    except (OSError, SyntaxError, ValueError):
        return None
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and node.orelse:
            found.append(
                (
                    node.body[0].lineno,
                    node.body[-1].end_lineno or node.body[-1].lineno,
                    node.orelse[0].lineno,
                    node.orelse[-1].end_lineno or node.orelse[-1].lineno,
                )
            )
    return tuple(found)


_BLAMED = re.compile(
    r"likely cause: (?:ranks disagree at #\d+(?: on ranks \[[\d, ]*\])?: )?ranks? ([\d, ]+) "
    r"(?:never issued |destroyed the default process group|issued .* where )"
)


def blamed_in(message: str) -> tuple[int, ...]:
    """The ranks a verdict's ledger cause says never issued a collective, destroyed the
    default group, or issued the odd call out (() if none)."""
    match = _BLAMED.search(message)
    return tuple(int(r) for r in match.group(1).split(", ")) if match else ()


def digests_differ(digests: Mapping[int, Mapping[str, Sequence] | None]) -> bool:
    """Whether the ranks' ledger digests (``ledger.digest``, by rank) say they issued
    different collectives: a group two of whose ranks hold different numbers or entries,
    or one of whose ranks holds none. A rank without a ledger (None) is left out, and so
    is a group where a rank's call raised (no CRC): the test saw it fail."""
    known = {int(r): d for r, d in digests.items() if d is not None}
    if len(known) < 2:
        return False
    held: dict[tuple, dict[int, tuple]] = {}
    for rank, digest in known.items():
        for name, (ranks, last, crc) in digest.items():
            held.setdefault((name, tuple(ranks)), {})[rank] = (last, crc)
    for (_, ranks), by_rank in held.items():
        if any(crc is None for _, crc in by_rank.values()):
            continue
        if len({by_rank.get(r) for r in ranks if r in known}) > 1:
            return True
    return False


def renumbered(entries: list[dict] | None, members: Sequence[int]) -> list[dict] | None:
    """A ledger whose ranks are a sub-world's (0..k-1), in global ranks: ``members`` are
    the sub-world's global ranks in order. Unchanged where they are the same."""
    if entries is None or list(members) == list(range(len(members))):
        return entries
    return [{**e, "ranks": [_global(members, r) for r in e.get("ranks") or ()]} for e in entries]


def renumbered_digest(digest: dict | None, members: Sequence[int]) -> dict | None:
    """:func:`renumbered` for a digest."""
    if digest is None or list(members) == list(range(len(members))):
        return digest
    return {n: [[_global(members, r) for r in rs], *rest] for n, (rs, *rest) in digest.items()}


def _global(members: Sequence[int], rank: int) -> int:
    return members[rank] if 0 <= rank < len(members) else rank


TABLE_TITLE = "Collectives issued around the divergence"


def table_in(text: str) -> str:
    """The side-by-side table a verdict's text carries ('' when none)."""
    start = text.find(TABLE_TITLE)
    if start < 0:
        return ""
    end = text.find("\n\n", start)
    return text[start : end if end >= 0 else len(text)].rstrip("\n") + "\n"


def side_by_side(
    ledgers: Mapping[int, Sequence[Mapping] | None], divergence: Divergence, around: int = 3
) -> str:
    """The ranks' entries of the diverging group, a few numbers either side of it."""
    ranks = sorted(r for r, entries in ledgers.items() if entries is not None)
    lo, hi = max(1, divergence.seq - around), divergence.seq + around
    rows = []
    for seq in range(lo, hi + 1):
        cells = []
        for r in ranks:
            entry = next(
                (e for e in ledgers[r] or () if e["group"] == divergence.group and e["seq"] == seq),
                None,
            )
            cells.append(_cell(entry))
        if any(cells):
            mark = ">" if seq == divergence.seq else " "
            rows.append((f"{mark}#{seq}", cells))
    if not rows:
        return ""
    width = max(len(c) for _, cells in rows for c in cells)
    width = max(width, max(len(f"rank {r}") for r in ranks))
    head = "     " + "  ".join(f"{f'rank {r}':<{width}}" for r in ranks)
    lines = [f"{seq:<5}" + "  ".join(f"{c or '-':<{width}}" for c in cells) for seq, cells in rows]
    group = "" if divergence.group == WORLD else f" (group {divergence.group})"
    title = f"{TABLE_TITLE}{group}:"
    return "\n".join([title, head.rstrip(), *(line.rstrip() for line in lines)]) + "\n"


def _cell(entry: Mapping | None) -> str:
    if entry is None:
        return ""
    arg = f" {entry['arg']}" if entry.get("arg") else ""
    return f"{entry['op']}{arg} {_site(entry)} {entry.get('state', '')}".rstrip()


def describe(entry: Mapping) -> str:
    """'all_reduce #1 (float32[8]) issued at x.py:29'."""
    return f"{name(entry)}{_arg(entry)} issued at {_site(entry)}"


def in_flight(entries: Sequence[Mapping] | None) -> Mapping | None:
    """A rank's last collective when it did not complete (it waits in it, or it raised)."""
    if not entries or entries[-1].get("state") == "completed":
        return None
    return entries[-1]
