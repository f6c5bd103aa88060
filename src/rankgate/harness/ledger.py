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

Why a wrapper and not torch's Flight Recorder: docs/harness.md ("When it records").

Each entry names its group as it was when the call was made (a group the test destroys
later still reads as the one it was). A test's ``destroy_process_group()`` of the default
group is recorded too, as an entry of its own (op DESTROY, never compared): a peer then
waits in, or fails, a collective the destroying rank can no longer join.

Point-to-point calls (send, recv, isend, irecv) are recorded with a count of their
own and never compared (their sequences differ by rank by design): they say where a
rank was. batch_isend_irecv and functional collectives (DTensor's) bypass these
functions and are not recorded.

Collectives called on a ProcessGroup object (``pg.allreduce([t]).wait()``, as torch's
own tests and its newer group API call them) are recorded too, under the name of the
torch.distributed function that does the same (``all_reduce``), so that a rank calling
one and its peer the other agree. Their returned Work is the entry's state: a rank
stuck in its ``.wait()`` reads as having issued the call and not finished it.

A collective called by torch.distributed itself (``dist.all_reduce`` calls
``group.allreduce``) is inside one recorded already; one called by rankgate's harness
(an adopted test's port agreement, the wait after a spawn helper's body) is the
harness's, not the test's: neither is recorded, and neither takes a number.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections import deque
from pathlib import Path
from typing import Any

from rankgate.harness.ledger_words import describe_arg, describe_reduce

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

PG_METHODS = {
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce_coalesced",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "allgather": "all_gather",
    "_allgather_base": "all_gather_into_tensor",
    "allgather_coalesced": "all_gather_coalesced",
    "allgather_into_tensor_coalesced": "all_gather_into_tensor_coalesced",
    "gather": "gather",
    "scatter": "scatter",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor_coalesced",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all_single",
    "barrier": "barrier",
    "monitored_barrier": "monitored_barrier",
    "send": "send",
    "recv": "recv",
    "recv_anysource": "recv",
}
"""ProcessGroup's methods recorded: method -> the op the ledger names (torch.distributed's
function of the same collective)."""

DESTROY = "destroy_process_group"
"""The op of a test's destroy of the default group: it takes the next number in the
group's count (the collective a peer waits in has that number) and is never compared."""

ISSUED, COMPLETED, FAILED = "issued", "completed", "failed"
"""An entry's state: called and not returned (or async and not finished), returned
(or its work finished), raised."""

_GROUP, _SEQ, _OP, _ARG, _FILE, _LINE, _STATE, _DESCRIBED, _REDUCE = range(9)
_REDUCING = frozenset(
    (
        "all_reduce",
        "all_reduce_coalesced",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "reduce_scatter_tensor_coalesced",
    )
)
"""ProcessGroup methods (by their torch.distributed names) whose options carry a reduce op."""
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
_HARNESS = str(Path(__file__).resolve().parent) + os.sep
"""rankgate's harness: a collective it calls is its own, never the test's."""
_passing: dict[str, bool] = {}
"""Per caller's file: whether its calls go unrecorded (c10d's, the harness's)."""
_method_swaps: dict[str, tuple[Any, Any]] = {}
"""Per ProcessGroup method: (torch's own, its wrapper)."""
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
        for method, op in PG_METHODS.items():
            original = dist.ProcessGroup.__dict__.get(method)
            if original is not None:
                _method_swaps[method] = (original, _wrap_method(op, original))
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
    for name, (original, wrapper) in _method_swaps.items():
        function, replaced = (wrapper, original) if wrapped else (original, wrapper)
        if dist.ProcessGroup.__dict__.get(name) is replaced:
            setattr(dist.ProcessGroup, name, function)


def installed() -> bool:
    return _installed


def begin_test() -> None:
    """A new test: empty the ledger and restart every group's count."""
    _entries.clear()
    _counters.clear()
    _aliases.clear()
    _described.clear()


def _passes(caller) -> bool:
    """Whether a call from ``caller``'s frame goes unrecorded: torch.distributed's own
    (inside a recorded call: recv's irecv, all_reduce's group.allreduce) or the harness's."""
    file = caller.f_code.co_filename
    passes = _passing.get(file)
    if passes is None:
        passes = _passing[file] = file == _c10d_file or file.startswith(_HARNESS)
    return passes


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
        if _passes(caller):
            return original(*args, **kwargs)
        if group_at is None:
            group = None
        elif len(args) > group_at:
            group = args[group_at]
        else:
            group = kwargs.get("group")
        arg = None
        if tensor_arg:
            arg = args[0] if args else next(iter(kwargs.values()), None)
        reduce = None
        if reduce_at is not None:  # unnamed: torch's SUM
            reduce = args[reduce_at] if len(args) > reduce_at else kwargs.get("op")
            reduce = "SUM" if reduce is None else reduce
        entry = _append(name, group, arg, caller, p2p, reduce)
        del caller  # no frame is kept: it would hold the test's locals (tensors) alive
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


def _wrap_method(op: str, original):
    """A ProcessGroup method recorded as ``op`` on the group it is called on; its Work
    is the entry's state until it finishes."""
    tensor_arg = op not in ("barrier", "monitored_barrier")
    p2p = op in POINT_TO_POINT

    def method(self, *args, **kwargs):
        __tracebackhide__ = True
        caller = sys._getframe(1)
        if _passes(caller):
            return original(self, *args, **kwargs)
        arg = args[0] if args and tensor_arg else None
        if isinstance(arg, list) and len(arg) == 1:
            arg = arg[0]  # pg.allreduce([t]) is dist.all_reduce(t)
        reduce = None
        if op in _REDUCING:
            options = args[1] if len(args) > 1 else kwargs.get("opts")
            reduce = getattr(options, "reduceOp", None) or "SUM"
        entry = _append(op, self, arg, caller, p2p, reduce)
        del caller
        try:
            result = original(self, *args, **kwargs)
        except BaseException:
            entry[_STATE] = FAILED
            raise
        entry[_STATE] = COMPLETED if result is None else result
        return result

    method.__name__ = method.__qualname__ = op
    method.__doc__ = original.__doc__
    method.__wrapped__ = original
    method.__rankgate_ledger__ = True
    return method


def _append(name: str, group, arg, caller, p2p: bool, reduce=None) -> list:
    """The entry of one call, appended to the ledger (an entry kept nowhere when the
    arguments are odd: torch rejects them next, and the call must not break here)."""
    frame = None
    try:
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
        if arg is not None:
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
    except Exception:
        entry = [None] * 9  # kept nowhere
    del frame  # no frame is kept: it would hold the test's locals (tensors) alive
    return entry


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
    this rank is not in (no ranks) are left out. A group where one of this rank's calls
    raised or never completed has no CRC (None): the test saw that call fail or left it
    (a timeout it provoked and caught, say), so its ranks are not silently apart there.
    None where no ledger is kept."""
    if not _installed:
        return None
    import zlib

    if len(_kind_texts) > 4096:  # a session of ever new shapes: start again
        _kind_texts.clear()
    lines: dict[Any, list] = {}
    last: dict[Any, int] = {}
    unsettled: set = set()  # groups with a call that raised or never completed
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
        if entry[_STATE] != COMPLETED and _state(entry[_STATE]) != COMPLETED:
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


def _state(state) -> str:
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


def _describe_group(group) -> tuple[str, tuple[int, ...]]:
    import torch.distributed as dist

    try:
        world = dist.group.WORLD
        if group is None or group is world:
            return "world", tuple(range(dist.get_world_size()))
        ranks = tuple(dist.get_process_group_ranks(group))
        return getattr(group, "group_name", "") or f"ranks {list(ranks)}", ranks
    except Exception:  # destroyed meanwhile, no default group any more, or unregistered
        return _unregistered(group)


def _unregistered(group) -> tuple[str, tuple[int, ...]]:
    """A group torch.distributed never registered (torch's newer group API makes them):
    named by its group_name, else by the order the test first used such groups (the same
    on every rank); its global ranks are not known."""
    try:
        named = group.group_name
    except Exception:  # a destroyed group, or no group object
        return "unknown", ()
    if named:
        return named, ()
    seen = sum(1 for name, _ in _described.values() if name.startswith("unregistered group"))
    return f"unregistered group {seen + 1}", ()
