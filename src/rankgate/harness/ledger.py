"""Each rank's ledger of the collectives its test issued: the evidence a hang's verdict
names the first diverging collective from (:mod:`rankgate.harness.divergence`).

``install()`` wraps torch.distributed's collective functions in a rank process (a pool's
rank once; an in-place rank before each test whose group should record: ``follow()``),
on every backend unless RANKGATE_LEDGER=0 (``enabled()``). Each call appends one entry
to a bounded ring: the sequence number on its process group, the op, the first tensor argument's
dtype and shape, the call site (the innermost frame outside torch and rankgate) and
its state. It records on the host when the call is made, so it works the same on
gloo and NCCL, where a collective returns before the GPU runs it. ``begin_test()``
empties it; ``snapshot()`` turns it into plain records (JSON-ready), safe to call from
another thread while the test is stuck.

Why a wrapper and not torch's Flight Recorder: docs/ledger.md ("When it records").

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
from sys import _getframe  # noqa: F401  (the wrappers' text calls these)
from threading import get_ident  # noqa: F401
from typing import Any

from rankgate.harness.ledger_call import passing
from rankgate.harness.ledger_entry import (  # noqa: F401  (the wrappers' text reads them)
    COMPLETED,
    DESTROY,
    FAILED,
    ISSUED,
    POINT_TO_POINT,
    STATE,
    describe_group,
    digest_of,
    record,
)
from rankgate.harness.ledger_frames import (  # noqa: F401  (the ledger's API)
    WRAPPER_FILE,
    is_wrapper_file,
    without_wrapper_frames,
)
from rankgate.harness.ledger_ops import (
    COLLECTIVES,
    PG_METHODS,
    ROOTED,
)

CAPACITY = 512
"""Entries kept per rank and test: the newest; sequence numbers go on counting."""

ENV = "RANKGATE_LEDGER"
"""Unset or 1: record on every backend, NCCL included; 0: on none (torch.distributed
unwrapped, verdicts from stacks) (:func:`enabled`)."""

_entries: deque[list] = deque(maxlen=CAPACITY)
_slots: dict[Any, list] = {}
"""Per group object passed this test (None: the default group): ``[its count, its
(name, ranks) or None until read, the group as entries name it]``. The default group
named and unnamed share one slot, so one dict lookup a call finds both."""
_p2p_slots: dict[Any, list] = {}
"""The same for point-to-point calls, counted apart."""
_described: dict[Any, tuple[str, tuple[int, ...]]] = {}
"""Per group this test: its name and ranks, read at its first call (a destroy ends them)."""
_installed = False
_swaps: dict[str, tuple[Any, Any, bool]] = {}
"""Per function: (torch's own, its wrapper, whether c10d holds it under the same name)."""
_c10d_file = ""
"""torch.distributed's own module: a call from there is inside a recorded one."""
_HARNESS = str(Path(__file__).resolve().parent) + os.sep
"""rankgate's harness: a collective it calls is its own, never the test's."""
_PASS, _LIBRARY, _OWN = 1, 2, 3
_file_kinds: dict[str, int] = {}
"""Per caller's file: _PASS (its calls go unrecorded: c10d's, the harness's), _LIBRARY
(torch's or rankgate's: the call site is further out) or _OWN (the test's code)."""
_inside = 0
"""The thread in a recorded torch.distributed call (0: none): the ProcessGroup method
torch calls inside it passes at once (finding its caller's file costs a frame object a
call). Another thread's recorded call may replace it meanwhile: a method that does not
find its own thread here asks its caller's file, which is always right."""
_method_swaps: dict[str, tuple[Any, Any]] = {}
"""Per ProcessGroup method: (torch's own, its wrapper)."""
_backend_swaps: dict[str, tuple[Any, Any]] = {}
"""The same per method of torch's Backend (ProcessGroupGloo's, ProcessGroupNCCL's base)."""
_group_member: Any = None
"""torch's GroupMember, whose WORLD is the default group of the moment."""


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
    """Whether a rank whose process group runs ``backend`` records its collectives: on
    every backend unless RANKGATE_LEDGER=0. On NCCL above all: there a rank that skipped
    a collective may pass while its peer waits, and only the ledger names it (the stacks
    blame the waiting rank). Its cost is its wrapper's host time per collective
    (docs/ledger-cost.md); ``backend`` is kept for the callers that decide per group
    (``follow``)."""
    return os.environ.get(ENV) != "0"


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
            wrapped = _wrap(name, original)
            # the same function under its home module, too
            _swaps[name] = (original, wrapped, getattr(c10d, name, None) is original)
        original = dist.destroy_process_group
        _swaps[DESTROY] = (
            original,
            _wrap_destroy(original),
            c10d.destroy_process_group is original,
        )
        # A group's methods, and a backend's, called by the test on a group torch never
        # registered (torch's newer group API, a backend's constructor) as on any other.
        for cls, swaps in ((dist.ProcessGroup, _method_swaps), (_backend_class(), _backend_swaps)):
            for method, op in PG_METHODS.items():
                original = cls.__dict__.get(method)
                if original is not None:
                    swaps[method] = (original, _wrap_method(op, original))
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
    tests on gloo and on NCCL groups, and each gets what a pool of its backend would
    (today the same on both: RANKGATE_LEDGER decides for every backend)."""
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
    for cls, swaps in ((dist.ProcessGroup, _method_swaps), (_backend_class(), _backend_swaps)):
        for name, (original, wrapper) in swaps.items():
            function, replaced = (wrapper, original) if wrapped else (original, wrapper)
            if cls.__dict__.get(name) is replaced:
                setattr(cls, name, function)


def _backend_class():
    from torch._C._distributed_c10d import Backend

    return Backend


def installed() -> bool:
    return _installed


def begin_test() -> None:
    """A new test: empty the ledger and restart every group's count."""
    _entries.clear()
    _slots.clear()
    _p2p_slots.clear()
    _described.clear()


def _kind_of(file: str) -> int:
    """Whether a call from ``file`` goes unrecorded (torch.distributed's own, inside a
    recorded call: recv's irecv, all_reduce's group.allreduce; or the harness's), is
    made from torch's or rankgate's code (the call site is further out) or the test's."""
    if file == _c10d_file or file.startswith(_HARNESS):
        kind = _PASS
    elif file.startswith(_LIBRARIES):
        kind = _LIBRARY
    else:
        kind = _OWN
    _file_kinds[file] = kind
    return kind


# The two wrappers below (a torch.distributed function's, a ProcessGroup method's) run on
# every collective (`rankgate bench ledger`, scripts/ledger/fake_group_cost.py): each step
# is written inline and records raw values (the dtype and torch.Size, the code object and
# instruction offset, torch's reduce op); ledger_entry words them when a verdict or a
# digest reads them. A function's wrapper is made from this text with the function's own
# parameters: the call passes its arguments on as it got them, with no tuple or dict
# packed and none looked up by position (0.2-0.3 us a call less than ``*args, **kwargs``).
# Its locals start with "_": torch's parameters never do.
_COLLECTIVE = """
def make(_original, _name, _slots, _append, _tensor_type, {defaults}):
    def {name}({parameters}):
        __tracebackhide__ = True  # pytest leaves this frame out of a failure's traceback
        _caller = _getframe(1)
        _code = _caller.f_code
        _kind = _file_kinds.get(_code.co_filename) or _kind_of(_code.co_filename)
        if _kind == _PASS:
            return _original({arguments})
        try:
            _slot = _slots.get({group})
            if _slot is None:
                _slot = _new_slot(_slots, {group})
            _seq = _slot[0] = _slot[0] + 1
            _described = _slot[1]
            if _described is None:  # read now: the test may destroy the group later
                _described = _slot[1] = _group_words(_slot[2])
            _arg = {tensor}
            if _arg is not None:
                if isinstance(_arg, _tensor_type):
                    _arg = (_arg.dtype, _arg.shape)
                else:
                    _arg = _shape_of(_arg)
            if _kind == _OWN:
                _lasti = _caller.f_lasti
            else:
                _code, _lasti = _outer_site(_caller)
            _entry = [_slot[2], _seq, _name, _arg, _code, _lasti, ISSUED, _described, {reduce},
                      {root}]
            _append(_entry)
        except Exception:  # odd arguments: torch rejects them next; kept nowhere
            _entry = [None] * 10
        del _caller  # no frame is kept: it would hold the test's locals (tensors) alive
        global _inside
        _me = get_ident()
        _outer = _inside == _me
        _inside = _me  # the group's own method, called next by torch, lets it through
        try:
            _result = _original({arguments})
        except BaseException:
            _entry[STATE] = FAILED
            raise
        finally:
            if not _outer and _inside == _me:
                _inside = 0
        _entry[STATE] = COMPLETED if _result is None else _result  # async: its Work
        return _result
    return {name}
"""


def _wrap(name: str, original, signature: inspect.Signature | None = None):
    """``original`` (torch.distributed's function ``name``) recorded, with its parameters
    (``signature``: another function's, as tests give a stand-in)."""
    import torch

    signature = signature or inspect.signature(original)
    parameters, arguments, defaults = passing(signature)
    names = list(signature.parameters)
    tensor_arg = name not in ("barrier", "monitored_barrier") and "object" not in name
    source = _COLLECTIVE.format(
        name=name,
        parameters=", ".join(parameters),
        arguments=", ".join(arguments),
        defaults=", ".join(defaults),
        group="group" if "group" in names else "None",
        tensor=names[0] if tensor_arg and names else "None",
        # The reduce op (SUM against MAX pairs silently); torch's default when unnamed.
        reduce="op" if "op" in names else "None",
        root=_root_expression(name, names),
    )
    scope: dict = {}
    exec(compile(source, __file__, "exec"), globals(), scope)
    slots = _p2p_slots if name in POINT_TO_POINT else _slots
    collective = scope["make"](original, name, slots, _entries.append, torch.Tensor, **defaults)
    collective.__qualname__ = name
    collective.__doc__ = original.__doc__
    collective.__wrapped__ = original
    collective.__rankgate_ledger__ = True
    return collective


def _root_expression(name: str, names: list[str]) -> str:
    """The wrapper's text for a rooted collective's root: its global rank, or its rank in
    the group (``group_src=``) as ``("group", n)``; None for the others."""
    root = ROOTED.get(name)
    if root is None or root not in names:
        return "None"
    if f"group_{root}" not in names:
        return root
    return f'({root} if group_{root} is None else ("group", group_{root}))'


def _wrap_method(op: str, original):
    """A ProcessGroup (or Backend) method recorded as ``op`` (:mod:`.ledger_methods`)."""
    from rankgate.harness.ledger_methods import wrap_method

    return wrap_method(op, original, sys.modules[__name__])


def _new_slot(slots: dict, group) -> list:
    """A group's first call this test: its slot, shared by the default group named and
    unnamed (one count)."""
    if group is not None and group is _group_member.WORLD:
        slot = slots.get(None) or _new_slot(slots, None)
    else:
        slot = [0, None, group]
    slots[group] = slot
    return slot


def _group_words(group) -> tuple[str, tuple[int, ...]]:
    """A group's name and ranks, read once a test (a point-to-point call and a collective
    on one group read it once)."""
    described = _described.get(group)
    if described is None:
        described = _described[group] = _describe_group(group)
    return described


def _outer_site(frame) -> tuple[Any, int]:
    """(code, instruction offset) of the innermost frame outside torch and rankgate
    (None, 0 where there is none): a collective torch's own code issued for the test."""
    while frame is not None:
        file = frame.f_code.co_filename
        if (_file_kinds.get(file) or _kind_of(file)) == _OWN:
            return frame.f_code, frame.f_lasti
        frame = frame.f_back
    return "", 0


def _wrap_destroy(original):
    """torch's destroy_process_group, recording a test's destroy of the default group:
    called from the test's code (not the harness's), and only once the group is gone (an
    adopted torch test's destroy is redirected and ends nothing)."""

    def destroy_process_group(group=None):
        __tracebackhide__ = True
        default = group is None or group is _group_member.WORLD
        site = _user_site(sys._getframe(1)) if default else None
        slot = None
        if site is not None:  # read now, while the group is there
            slot = _slots.get(None) or _new_slot(_slots, None)
            if slot[1] is None:
                slot[1] = _group_words(None)
        result = original(group)
        if slot is not None and _group_member.WORLD is None:
            slot[0] += 1  # the number a peer's next collective has
            _entries.append([None, slot[0], DESTROY, None, *site, COMPLETED, slot[1], None, None])
            # a default group made next is another group: read at its first call
            _described.pop(None, None)
            for slots in (_slots, _p2p_slots):
                if None in slots:
                    slots[None][1] = None
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
    """(dtype, shape) of a tensor-like, (count, (dtype, shape)) of a list of tensors,
    else None."""
    shape = getattr(arg, "shape", None)
    if shape is not None:
        return getattr(arg, "dtype", None), shape
    if isinstance(arg, list | tuple) and arg:
        first = arg[0]
        shape = getattr(first, "shape", None)
        return None if shape is None else (len(arg), (getattr(first, "dtype", None), shape))
    return None


# --- reading it back ---------------------------------------------------------------


def snapshot() -> list[dict]:
    """The ledger as plain records, oldest first (see :func:`ledger_entry.record`)."""
    entries = list(_entries)  # one C call under the GIL: a consistent copy
    return [record(e) for e in entries]


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
    return digest_of(list(_entries))


def now() -> list[dict] | None:
    """:func:`snapshot`, or None where no ledger is kept (turned off)."""
    return snapshot() if _installed else None


def _describe_group(group) -> tuple[str, tuple[int, ...]]:
    return describe_group(group, _described.values())
