"""The ledger's wrapper of a ProcessGroup method (``pg.allreduce([t]).wait()``,
``pg.allreduce(t, timeout=...)``) and of a backend's (``ProcessGroupGloo(...)``): each call
recorded as the torch.distributed function of the same collective (``all_reduce``) on the
group it is called on, with its reduce op and root read from either call form (options,
or the values themselves). The rest of the ledger, its state included, is
:mod:`rankgate.harness.ledger`'s, which hands itself in (``ledger=``): this module imports
nothing of it, so the two are no import cycle."""

from __future__ import annotations

from sys import _getframe
from threading import get_ident

from rankgate.harness.ledger_entry import COMPLETED, FAILED, ISSUED, POINT_TO_POINT, STATE
from rankgate.harness.ledger_ops import METHOD_ROOT_AT, REDUCING

_ABSENT = object()
"""A positional parameter of a method's wrapper that the caller left out."""

_REDUCE_OP_TYPES = ("ReduceOp", "RedOpType")
"""torch's reduce op given as itself (``pg.allreduce([t], ReduceOp.MAX)``), not in options."""


def wrap_method(op: str, original, ledger):
    """A ProcessGroup (or Backend) method recorded as ``op`` on the group it is called on;
    its Work is the entry's state until it finishes. ``ledger``: the ledger module, whose
    state (entries, slots, the thread inside a recorded call) the wrapper reads."""
    record_call = _method_recorder(op, ledger)
    kind_of, PASS = ledger._kind_of, ledger._PASS

    # Two positional parameters by name: torch calls group.allreduce([t], opts), a test
    # pg.allreduce([t]); passed on as they came, without packing a tuple (0.2 us a call).
    def method(self, first=_ABSENT, second=_ABSENT, *rest, **kwargs):
        __tracebackhide__ = True
        inside = ledger._inside
        if inside and inside == get_ident():  # torch's own call, inside a recorded one
            if rest or kwargs:
                return original(self, *_given(first, second, rest), **kwargs)
            if second is not _ABSENT:
                return original(self, first, second)
            return original(self) if first is _ABSENT else original(self, first)
        caller = _getframe(1)
        code = caller.f_code
        kind = ledger._file_kinds.get(code.co_filename) or kind_of(code.co_filename)
        if kind == PASS:
            return original(self, *_given(first, second, rest), **kwargs)
        entry = record_call(self, caller, kind, first, second, rest, kwargs)
        del caller  # no frame is kept: it would hold the test's locals (tensors) alive
        try:
            if rest or kwargs:
                result = original(self, *_given(first, second, rest), **kwargs)
            elif second is not _ABSENT:
                result = original(self, first, second)
            else:
                result = original(self) if first is _ABSENT else original(self, first)
        except BaseException:
            entry[STATE] = FAILED
            raise
        entry[STATE] = COMPLETED if result is None else result
        return result

    method.__name__ = method.__qualname__ = op
    method.__doc__ = original.__doc__
    method.__wrapped__ = original
    method.__rankgate_ledger__ = True
    return method


def _method_recorder(op: str, ledger):
    """What a method's wrapper records of one call as ``op``: its entry, appended (one
    that cannot be read is kept nowhere: torch rejects its arguments next)."""
    import torch

    tensor_type = torch.Tensor
    tensor_arg = op not in ("barrier", "monitored_barrier")
    slots = ledger._p2p_slots if op in POINT_TO_POINT else ledger._slots
    reducing, root_at = op in REDUCING, METHOD_ROOT_AT.get(op)
    append = ledger._entries.append
    new_slot, group_words, shape_of = ledger._new_slot, ledger._group_words, ledger._shape_of
    outer_site, OWN = ledger._outer_site, ledger._OWN

    def record_call(group, caller, kind, first, second, rest, kwargs) -> list:
        try:
            slot = slots.get(group)
            if slot is None:
                slot = new_slot(slots, group)
            seq = slot[0] = slot[0] + 1
            described = slot[1]
            if described is None:
                described = slot[1] = group_words(slot[2])
            arg = None
            if tensor_arg and first is not _ABSENT:
                arg = first
                if type(arg) is list and len(arg) == 1:
                    arg = arg[0]  # pg.allreduce([t]) is dist.all_reduce(t)
                arg = (arg.dtype, arg.shape) if isinstance(arg, tensor_type) else shape_of(arg)
            given = (first, second, *rest)
            reduce = _method_reduce(given, kwargs) if reducing else None
            root = None if root_at is None else _method_root(given, root_at, kwargs)
            if kind == OWN:
                code, lasti = caller.f_code, caller.f_lasti
            else:
                code, lasti = outer_site(caller)
            entry = [slot[2], seq, op, arg, code, lasti, ISSUED, described, reduce, root]
            append(entry)
            return entry
        except Exception:
            return [None] * 10

    return record_call


def _method_reduce(given: tuple, kwargs: dict):
    """A reducing method's reduce op: in its options (``opts.reduceOp``) or given as a
    ReduceOp, positionally after the tensor(s) (the root, for reduce) or as ``op=``;
    torch's default (SUM) when none is given."""
    for value in (*given[1:3], kwargs.get("op"), kwargs.get("opts")):
        reduce = getattr(value, "reduceOp", None)
        if reduce is not None:
            return reduce
        if type(value).__name__ in _REDUCE_OP_TYPES:
            return value
    return "SUM"


def _method_root(given: tuple, at: int, kwargs: dict):
    """A rooted method's root: positional ``at`` (an int, or options with ``rootRank``),
    ``root=``, or ``opts=``'s rootRank."""
    value = given[at] if len(given) > at else _ABSENT
    if value is _ABSENT:
        value = kwargs.get("root", kwargs.get("opts"))
    if value is None or isinstance(value, int):
        return value
    return getattr(value, "rootRank", None)


_ABSENT = object()
"""A positional parameter of a ProcessGroup method's wrapper that the caller left out."""


def _given(first, second, rest: tuple) -> tuple:
    """The positional arguments a method's wrapper was called with."""
    if first is _ABSENT:
        return ()
    return (first,) if second is _ABSENT else (first, second, *rest)


def _given(first, second, rest: tuple) -> tuple:
    """The positional arguments a method's wrapper was called with."""
    if first is _ABSENT:
        return ()
    return (first,) if second is _ABSENT else (first, second, *rest)
