"""One ledger entry (:mod:`rankgate.harness.ledger`) and what is read from it: its plain
record (a verdict's evidence) and the digest of a test's entries (what the ranks compare
at its end).

An entry holds what the wrapper found, raw, so that a collective pays for no words: the
first tensor's dtype and torch.Size, torch's reduce op, the call site as its code object
and instruction offset (``frame.f_lasti``: the line number costs 0.25 us to read from a
frame, the offset 0.02 us), the Work of an async call. They are worded here, when a
verdict or a digest reads them. Standard library only (torch's types are only held),
but for :func:`describe_group`, which reads torch.distributed's registry of groups.
"""

from __future__ import annotations

import zlib
from types import CodeType
from typing import Any

from rankgate.harness.ledger_words import describe_arg, describe_reduce, describe_root

GROUP, SEQ, OP, ARG, FILE, LINE, STATE, DESCRIBED, REDUCE, ROOT = range(10)
"""An entry is a list of these: its group (None for the default one), its number on it,
the op, the argument (``(dtype, shape)``, ``(count, (dtype, shape))`` or None), the call
site (a code object and its instruction offset, or a file name and line), its state,
its group's ``(name, ranks)`` as they were at the call, its reduce op, and its root (a
rank, ``("group", rank)`` for a rank in the group, None for a collective without one)."""

ISSUED, COMPLETED, FAILED = "issued", "completed", "failed"
"""An entry's state: called and not returned (or async and not finished), returned
(or its work finished), raised. An async call's state is its Work until read."""

POINT_TO_POINT = ("send", "recv", "isend", "irecv")
"""Recorded too, counted apart from the collectives and never compared."""

DESTROY = "destroy_process_group"
"""The op of a test's destroy of the default group: it takes the next number in the
group's count (the collective a peer waits in has that number) and is never compared."""

P2P = "p2p"


def record(entry: list) -> dict:
    """One entry as ``{group, ranks, seq, op, arg, file, line, state, reduce, root}``:
    ``group`` a name every rank gives the same group ("world" for the default one; "p2p:"
    before it for a point-to-point call), ``ranks`` its global ranks, ``arg`` like
    "float32[4]" ("" for none), ``reduce`` the reduce op ("SUM", "MAX"; "" for a call
    without one), ``root`` like "src 0" or "dst group rank 1" ("" for none)."""
    name, ranks = entry[DESCRIBED]
    file, line = site(entry)
    return {
        "group": f"{P2P}:{name}" if entry[OP] in POINT_TO_POINT else name,
        "ranks": list(ranks),
        "seq": entry[SEQ],
        "op": entry[OP],
        "arg": describe_arg(entry[ARG]),
        "file": file,
        "line": line,
        "state": state_word(entry[STATE]),
        "reduce": describe_reduce(entry[REDUCE]),
        "root": describe_root(entry[OP], entry[ROOT]),
    }


def site(entry: list) -> tuple[str, int]:
    """(file, line) of an entry's call site ("", 0 where none was found)."""
    where, at = entry[FILE], entry[LINE]
    if isinstance(where, CodeType):
        return where.co_filename, line_at(where, at)
    return where, at


def line_at(code: CodeType, offset: int) -> int:
    """The line of the instruction at ``offset`` (bytes, as ``frame.f_lasti`` gives it):
    what ``frame.f_lineno`` said at the call."""
    key = (code, offset)
    line = _lines.get(key)
    if line is None:
        line = code.co_firstlineno
        for start, end, number in code.co_lines():
            if start <= offset < end:
                line = number if number is not None else line
                break
        if len(_lines) > 4096:
            _lines.clear()
        _lines[key] = line
    return line


_lines: dict[tuple[CodeType, int], int] = {}


def state_word(state) -> str:
    if isinstance(state, str):
        return state
    try:  # an async call's Work: one that ended with an error (a timeout) failed
        if not state.is_completed():
            return ISSUED
    except Exception:
        return ISSUED
    try:  # its future raises the call's error (Work.exception() is deprecated)
        state.get_future().value()
    except Exception:
        return FAILED
    return COMPLETED


def digest_of(entries: list[list]) -> dict[str, list]:
    """Per group, ``[its ranks, its last number, a CRC of every entry's number, op,
    reduce op, dtype, shape and root]`` (see ``ledger.digest``)."""
    if len(_kind_texts) > 4096:  # a session of ever new shapes: start again
        _kind_texts.clear()
    lines: dict[Any, list] = {}
    last: dict[Any, int] = {}
    unsettled: set = set()  # groups with a call that raised or never completed
    for entry in entries:
        op, described = entry[OP], entry[DESCRIBED]
        if op in POINT_TO_POINT or op == DESTROY or not described or not described[1]:
            continue
        # Worded once per kind of call (hashing torch's reduce op itself costs 0.75 us).
        reduce, arg, root = entry[REDUCE], entry[ARG], entry[ROOT]
        key = (op, id(reduce), arg, root)
        known = _kind_texts.get(key)
        if known is None or known[0] is not reduce:
            text = f"{op} {describe_reduce(reduce)} {describe_arg(arg)} {root}"
            known = _kind_texts[key] = (reduce, text)  # holds it: its id is not reused
        kept = lines.get(described)
        if kept is None:
            kept = lines[described] = []
        kept.append(known[1])
        last[described] = entry[SEQ]
        if entry[STATE] != COMPLETED and state_word(entry[STATE]) != COMPLETED:
            unsettled.add(described)
    # The numbers are in order within a group: its last one and its count say which.
    return {
        name: [
            list(ranks),
            last[(name, ranks)],
            None if (name, ranks) in unsettled else zlib.crc32("\n".join(kept).encode()),
        ]
        for (name, ranks), kept in lines.items()
    }


_kind_texts: dict[tuple, tuple[Any, str]] = {}
"""(op, reduce op's id, arg) -> (that reduce op, the call's words), for :func:`digest_of`."""


def describe_group(group, known) -> tuple[str, tuple[int, ...]]:
    """A group's ``(name, ranks)``: "world" for the default group; ``known``, the groups
    this test described already, numbers the groups torch never registered."""
    import torch.distributed as dist

    try:
        world = dist.group.WORLD
        if group is None or group is world:
            return "world", tuple(range(dist.get_world_size()))
        ranks = tuple(dist.get_process_group_ranks(group))
        return getattr(group, "group_name", "") or f"ranks {list(ranks)}", ranks
    except Exception:  # destroyed meanwhile, no default group any more, or unregistered
        return _unregistered(group, known)


def _unregistered(group, known) -> tuple[str, tuple[int, ...]]:
    """A group torch.distributed never registered (torch's newer group API and a backend's
    constructor make them): named by its group_name, else by the order the test first used
    such groups (the same on every rank). Its ranks are every rank's when it is as large as
    the default group (a rank that never calls on it is then seen to be missing), else not
    known."""
    try:
        named, size = group.group_name, group.size()
    except Exception:  # a destroyed group, or no group object
        return "unknown", ()
    ranks = tuple(range(size)) if size == _default_size() else ()
    if named:
        return named, ranks
    seen = sum(1 for name, _ in known if name.startswith("unregistered group"))
    return f"unregistered group {seen + 1}", ranks


def _default_size() -> int | None:
    import torch.distributed as dist

    try:
        return dist.get_world_size()
    except Exception:  # no default group
        return None
