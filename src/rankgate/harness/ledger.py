"""Each rank's ledger of the collectives its test issued: the evidence a hang's verdict
names the first diverging collective from (:mod:`rankgate.harness.divergence`).

``install()`` wraps torch.distributed's collective functions in a rank process (a pool's
rank once; an in-place rank before each test whose group should record: ``follow()``),
unless ``enabled()`` says no for the rank's backend. Each call appends one entry to a bounded
ring: the sequence number on its process group, the op, the first tensor argument's
dtype and shape, the call site (the innermost frame outside torch and rankgate) and
its state. It records on the host when the call is made, so it works the same on
gloo and NCCL, where a collective returns before the GPU runs it. ``begin_test()``
empties it; ``snapshot()`` turns it into plain records (JSON-ready), safe to call from
another thread while the test is stuck.

Why a wrapper and not torch's Flight Recorder: this torch records gloo in it too
(``TORCH_FR_BUFFER_SIZE``), but it added 2.8 us to a gloo all_reduce here against
2.1 us for this wrapper (0.8 us in a hot loop: ``rankgate bench ledger``), it keeps
its entries across tests, it counts the collectives torch's own helpers issue inside
one call, and its dump must be asked for from the stuck process all the same.

Each entry names its group as it was when the call was made (a group the test destroys
later still reads as the one it was). A test's ``destroy_process_group()`` of the default
group is recorded too, as an entry of its own (op DESTROY, never compared): a peer then
waits in, or fails, a collective the destroying rank can no longer join.

Point-to-point calls (send, recv, isend, irecv) are recorded with a count of their
own and never compared (their sequences differ by rank by design): they say where a
rank was. batch_isend_irecv and functional collectives (DTensor's) bypass these
functions and are not recorded.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections import deque
from pathlib import Path
from typing import Any

CAPACITY = 512
"""Entries kept per rank and test: the newest; sequence numbers go on counting."""

WRAPPER_FILE = "/".join(Path(__file__).parts[-3:])
"""This module as a stack names it ("rankgate/harness/ledger.py"). Its wrapper's frame sits
between torch's and the test's in every recorded collective's stack; the stacks and
tracebacks shown leave it out (:func:`without_wrapper_frames`, :func:`is_wrapper_file`,
and ``__tracebackhide__`` for pytest's own), as they leave out the harness's."""

ENV = "RANKGATE_LEDGER"
"""1: record on every backend; 0: on none (torch.distributed unwrapped, verdicts from
stacks); unset: on every backend but NCCL (:func:`enabled`)."""

COLLECTIVES = (
    "all_reduce",
    "broadcast",
    "reduce",
    "all_gather",
    "all_gather_into_tensor",
    "gather",
    "scatter",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "monitored_barrier",
    "all_gather_object",
    "broadcast_object_list",
    "gather_object",
    "scatter_object_list",
)
"""The torch.distributed functions recorded: every collective of the public API."""

POINT_TO_POINT = ("send", "recv", "isend", "irecv")
"""Recorded too, counted apart from the collectives and never compared."""

DESTROY = "destroy_process_group"
"""The op of a test's destroy of the default group: it takes the next number in the
group's count (the collective a peer waits in has that number) and is never compared."""

ISSUED, COMPLETED, FAILED = "issued", "completed", "failed"
"""An entry's state: called and not returned (or async and not finished), returned
(or its work finished), raised."""

_GROUP, _SEQ, _OP, _ARG, _FILE, _LINE, _STATE, _DESCRIBED, _REDUCE = range(9)
P2P = "p2p"

_entries: deque[list] = deque(maxlen=CAPACITY)
_counters: dict[Any, int] = {}
_aliases: dict[Any, Any] = {}
"""Per group object passed this test: None for the default group, else itself."""
_described: dict[Any, tuple[str, tuple[int, ...]]] = {}
"""Per group this test: its name and ranks, read at its first call (a destroy ends them)."""
_UNSEEN = object()
_installed = False
_swaps: dict[str, tuple[Any, Any, bool]] = {}
"""Per function: (torch's own, its wrapper, whether c10d holds it under the same name)."""
_c10d_file = ""
"""torch.distributed's own module: a call from there is inside a recorded one."""
_group_member: Any = None
"""torch's GroupMember, whose WORLD is the default group of the moment."""
_outside: dict[str, bool] = {}
"""Per file name: whether its frames are the test's own code (cached, one lookup a frame)."""


def _library_dirs() -> tuple[str, ...]:
    import torch

    here = Path(__file__).resolve().parents[1]  # the rankgate package
    return (str(Path(torch.__file__).parent) + os.sep, str(here) + os.sep)


_LIBRARIES: tuple[str, ...] = ()


def setting_problem() -> str | None:
    """What is wrong with RANKGATE_LEDGER's value, if anything (None: unset, 0 or 1)."""
    value = os.environ.get(ENV)
    if value is None or value in ("0", "1"):
        return None
    return f"{ENV}={value!r}: set 1 to record collectives on every backend, 0 on none"


def enabled(backend: str = "") -> bool:
    """Whether a rank whose process group runs ``backend`` records its collectives.

    Unset, every backend but NCCL: there the pool's time per test grew by 0.25-0.96 ms
    with torch.distributed wrapped on four of five H100 hosts, and the wrapper cost
    1.65 us a call on one (docs/harness.md, "Cost"), beyond the ledger's goal of 1 us and
    no change in the pool. A group with NCCL in it ("cpu:gloo,cuda:nccl") counts as NCCL.
    """
    value = os.environ.get(ENV)
    if value in ("0", "1"):
        return value == "1"
    return "nccl" not in backend


def install(backend: str = "") -> bool:
    """Wrap torch.distributed's collectives for a rank whose group runs ``backend`` (empty:
    whichever; the ledger's benchmark). False when not recording."""
    global _installed, _LIBRARIES, _group_member, _c10d_file
    if _installed:
        return True
    if not enabled(backend):
        return False
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    if not _swaps:  # built once per process; a later install puts the same wrappers back
        _LIBRARIES = _library_dirs()
        _group_member = c10d.GroupMember
        _c10d_file = c10d.__file__
        for name in COLLECTIVES + POINT_TO_POINT:
            original = getattr(dist, name, None)
            if original is None:
                continue
            wrapped = _wrap(name, original, list(inspect.signature(original).parameters))
            # the same function under its home module, too
            _swaps[name] = (original, wrapped, getattr(c10d, name, None) is original)
        original = dist.destroy_process_group
        _swaps[DESTROY] = (
            original,
            _wrap_destroy(original),
            c10d.destroy_process_group is original,
        )
    _put(dist, c10d, wrapped=True)
    _installed = True
    return True


def uninstall() -> None:
    """Put torch.distributed's own functions back: nothing is recorded until ``install``."""
    global _installed
    if not _installed:
        return
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    _put(dist, c10d, wrapped=False)
    _installed = False


def follow(backend: str) -> bool:
    """Record or not, as :func:`enabled` says for ``backend``: in place one process runs
    tests on gloo and on NCCL groups, and each gets what a pool of its backend would."""
    if enabled(backend):
        return install(backend)
    uninstall()
    return False


def _put(dist, c10d, *, wrapped: bool) -> None:
    for name, (original, wrapper, in_c10d) in _swaps.items():
        function, replaced = (wrapper, original) if wrapped else (original, wrapper)
        for module in (dist, c10d) if in_c10d else (dist,):
            # Only where ours is found: an adopted torch test's redirect of
            # destroy_process_group (adopt/torchcase.py) may sit there, and stays.
            if getattr(module, name, None) is replaced:
                setattr(module, name, function)


def installed() -> bool:
    return _installed


def begin_test() -> None:
    """A new test: empty the ledger and restart every group's count."""
    _entries.clear()
    _counters.clear()
    _aliases.clear()
    _described.clear()


def _wrap(name: str, original, parameters: list[str]):
    group_at = parameters.index("group") if "group" in parameters else None
    tensor_arg = name not in ("barrier", "monitored_barrier") and "object" not in name
    p2p = name in POINT_TO_POINT
    # The reduce op (SUM against MAX pairs silently): its place; unnamed, torch's SUM.
    reduce_at = parameters.index("op") if "op" in parameters else None

    def collective(*args, **kwargs):
        # Kept lean: it runs on every collective (benchmarked by `rankgate bench ledger`).
        __tracebackhide__ = True  # pytest leaves this frame out of a failure's traceback
        caller = sys._getframe(1)
        if caller.f_code.co_filename == _c10d_file:
            return original(*args, **kwargs)  # torch's own call inside one recorded (recv's irecv)
        frame = None
        try:
            if group_at is None:
                group = None
            elif len(args) > group_at:
                group = args[group_at]
            else:
                group = kwargs.get("group")
            if group is not None:
                same = _aliases.get(group, _UNSEEN)
                if same is _UNSEEN:  # once per group and test: is it the default one?
                    same = _aliases[group] = None if group is _group_member.WORLD else group
                group = same  # the default group named: one count with the unnamed calls
            described = _described.get(group)
            if described is None:  # read now: the test may destroy the group before the verdict
                described = _described[group] = _describe_group(group)
            if p2p:
                group = (P2P, group)
            seq = _counters.get(group, 0) + 1
            _counters[group] = seq
            arg = None
            if tensor_arg:
                arg = args[0] if args else next(iter(kwargs.values()), None)
                shape = getattr(arg, "shape", None)
                arg = (getattr(arg, "dtype", None), shape) if shape is not None else _shape_of(arg)
            frame = caller
            while frame is not None:
                file = frame.f_code.co_filename
                outside = _outside.get(file)
                if outside is None:
                    outside = _outside[file] = not file.startswith(_LIBRARIES)
                if outside:
                    break
                frame = frame.f_back
            reduce = None
            if reduce_at is not None:
                reduce = args[reduce_at] if len(args) > reduce_at else kwargs.get("op")
                reduce = "SUM" if reduce is None else reduce
            entry = [
                group,
                seq,
                name,
                arg,
                file if frame else "",
                frame.f_lineno if frame else 0,
                ISSUED,
                described,
                reduce,
            ]
            _entries.append(entry)
        except Exception:  # odd arguments (torch rejects them next): never break the call
            entry = [None] * 9  # kept nowhere
        # No frame object is kept: it would hold the test's locals (tensors) alive.
        del frame, caller
        try:
            result = original(*args, **kwargs)
        except BaseException:
            entry[_STATE] = FAILED
            raise
        entry[_STATE] = COMPLETED if result is None else result  # async: its Work
        return result

    collective.__name__ = collective.__qualname__ = name
    collective.__doc__ = original.__doc__
    collective.__wrapped__ = original
    collective.__rankgate_ledger__ = True
    return collective


def _wrap_destroy(original):
    """torch's destroy_process_group, recording a test's destroy of the default group:
    called from the test's code (not the harness's), and only once the group is gone (an
    adopted torch test's destroy is redirected and ends nothing)."""

    def destroy_process_group(group=None):
        __tracebackhide__ = True
        default = group is None or group is _group_member.WORLD
        site = _user_site(sys._getframe(1)) if default else None
        described = (_described.get(None) or _describe_group(None)) if site else None
        result = original(group)
        if site is not None and _group_member.WORLD is None:
            seq = _counters.get(None, 0) + 1  # the number a peer's next collective has
            _counters[None] = seq
            _entries.append([None, seq, DESTROY, None, *site, COMPLETED, described, None])
            _described.pop(None, None)  # a default group made next is another group
        return result

    destroy_process_group.__doc__ = original.__doc__
    destroy_process_group.__wrapped__ = original
    destroy_process_group.__rankgate_ledger__ = True
    return destroy_process_group


def _user_site(frame) -> tuple[str, int] | None:
    """(file, line) of the innermost caller outside torch; None when that is rankgate
    (the harness's own destroy, between tests or at a pool's end)."""
    while frame is not None:
        file = frame.f_code.co_filename
        if not file.startswith(_LIBRARIES):
            return file, frame.f_lineno
        if not file.startswith(_LIBRARIES[:1]):  # rankgate's, not torch's
            return None
        frame = frame.f_back
    return None


def _shape_of(arg):
    """(count, (dtype, shape)) of a list of tensors, else None."""
    if isinstance(arg, list | tuple) and arg:
        first = arg[0]
        shape = getattr(first, "shape", None)
        return None if shape is None else (len(arg), (getattr(first, "dtype", None), shape))
    return None


def is_wrapper_file(filename: str) -> bool:
    """Whether a traceback entry's file is this module (its frames are the wrapper's)."""
    return filename.replace(os.sep, "/").endswith(WRAPPER_FILE)


def without_wrapper_frames(lines: list[str]) -> list[str]:
    """A stack's lines without the wrapper's frame: a hung test reads as torch's
    collective called from the test's own line, as it would without the ledger."""
    return [line for line in lines if not (line.startswith('  File "') and WRAPPER_FILE in line)]


# --- reading it back ---------------------------------------------------------------


def snapshot() -> list[dict]:
    """The ledger as plain records, oldest first (see :func:`record`)."""
    entries = list(_entries)  # one C call under the GIL: a consistent copy
    groups: dict[Any, tuple[str, tuple[int, ...]]] = {}
    return [record(e, groups) for e in entries]


def digest() -> dict[str, list] | None:
    """What the ranks compare at a test's end, small enough to send with every result:
    per group, ``[its ranks, its last number, a CRC of every kept entry's number, op,
    reduce op, dtype and shape]``. Point-to-point calls, destroys and calls on a group
    this rank is not in (no ranks) are left out. None where no ledger is kept."""
    if not _installed:
        return None
    import zlib

    if len(_kind_texts) > 4096:  # a session of ever new shapes: start again
        _kind_texts.clear()
    lines: dict[Any, list] = {}
    last: dict[Any, int] = {}
    for entry in list(_entries):
        op, described = entry[_OP], entry[_DESCRIBED]
        if op in POINT_TO_POINT or op == DESTROY or not described or not described[1]:
            continue
        # Worded once per kind of call (hashing torch's reduce op itself costs 0.75 us).
        reduce = entry[_REDUCE] if len(entry) > _REDUCE else None  # an entry made without
        arg = entry[_ARG]
        key = (op, id(reduce), arg)
        known = _kind_texts.get(key)
        if known is None or known[0] is not reduce:
            text = f"{op} {describe_reduce(reduce)} {describe_arg(arg)}"
            known = _kind_texts[key] = (reduce, text)  # holds it: its id is not reused
        kept = lines.get(described)
        if kept is None:
            kept = lines[described] = []
        kept.append(known[1])
        last[described] = entry[_SEQ]
    # The numbers are in order within a group: its last one and its count say which.
    return {
        name: [list(ranks), last[(name, ranks)], zlib.crc32("\n".join(kept).encode())]
        for (name, ranks), kept in lines.items()
    }


_kind_texts: dict[tuple, tuple[Any, str]] = {}
"""(op, reduce op's id, arg) -> (that reduce op, the call's words), for :func:`digest`."""


def now() -> list[dict] | None:
    """:func:`snapshot`, or None where no ledger is kept (turned off)."""
    return snapshot() if _installed else None


def record(entry: list, groups: dict) -> dict:
    """One entry as ``{group, ranks, seq, op, arg, file, line, state, reduce}``: ``group``
    a name every rank gives the same group ("world" for the default one; "p2p:" before it
    for a point-to-point call), ``ranks`` its global ranks, ``arg`` like "float32[4]" (""
    for none), ``reduce`` the reduce op ("SUM", "MAX"; "" for a call without one)."""
    group = entry[_GROUP]
    p2p = entry[_OP] in POINT_TO_POINT
    if p2p:
        group = group[1]
    described = entry[_DESCRIBED] if len(entry) > _DESCRIBED else None
    if described is None:  # read lazily (an entry made without one)
        if group not in groups:
            groups[group] = _describe_group(group)
        described = groups[group]
    name, ranks = described
    return {
        "group": f"{P2P}:{name}" if p2p else name,
        "ranks": list(ranks),
        "seq": entry[_SEQ],
        "op": entry[_OP],
        "arg": describe_arg(entry[_ARG]),
        "file": entry[_FILE],
        "line": entry[_LINE],
        "state": _state(entry[_STATE]),
        "reduce": describe_reduce(entry[_REDUCE] if len(entry) > _REDUCE else None),
    }


def describe_reduce(op) -> str:
    """'SUM', 'MAX' (torch's RedOpType), 'PREMUL_SUM'; '' for none."""
    if op is None:
        return ""
    name = getattr(op, "name", None)
    if name is None:  # a ReduceOp object (premul_sum) rather than its type
        name = str(op).rpartition(".")[2].split(":")[0].strip("<> ")
    return str(name)


def _state(state) -> str:
    if isinstance(state, str):
        return state
    try:  # an async call's Work
        return COMPLETED if state.is_completed() else ISSUED
    except Exception:
        return ISSUED


def _describe_group(group) -> tuple[str, tuple[int, ...]]:
    import torch.distributed as dist

    try:
        world = dist.group.WORLD
        if group is None or group is world:
            return "world", tuple(range(dist.get_world_size()))
        ranks = tuple(dist.get_process_group_ranks(group))
        return getattr(group, "group_name", "") or f"ranks {list(ranks)}", ranks
    except Exception:  # destroyed meanwhile, or no default group any more
        return "unknown", ()


def describe_arg(arg) -> str:
    """'float32[4]', '2x float32[4]' (a list), '' (none)."""
    if arg is None:
        return ""
    if isinstance(arg[0], int):
        return f"{arg[0]}x {describe_arg(arg[1])}"
    dtype, shape = arg
    return f"{str(dtype).removeprefix('torch.')}[{', '.join(map(str, shape))}]"
