"""Per-test state of a rank, the same in a pool's rank and in place: the seed, the
collectives' timeout, and what is reset after each test (what a finished test left
behind that fails it is :mod:`rankgate.harness.aftertest`'s).

Imports only the standard library, torch and ``hypothesis_bridge`` (it runs inside rank processes).
"""

from __future__ import annotations

import importlib
import os
import random
import sys
from collections.abc import Iterator
from datetime import timedelta

import torch
import torch.distributed as dist

from rankgate.errors import RankgateError
from rankgate.harness import hypothesis_bridge


def set_collective_timeout(seconds: float, group=None) -> None:
    """Give ``group``'s operations (default: the default group's) this timeout.

    Checked before every test, since a test may have changed it; set only when it
    differs, as setting it costs up to a millisecond a test on NCCL.
    """
    if not dist.is_initialized():
        return
    wanted = timedelta(seconds=seconds)
    if _collective_timeouts(group) == {wanted}:
        return
    from torch.distributed.distributed_c10d import _set_pg_timeout

    _set_pg_timeout(wanted, group)


def _collective_timeouts(group=None) -> set[timedelta] | None:
    """The timeouts ``group``'s backends hold now (None where this torch hides them)."""
    group = group or dist.GroupMember.WORLD
    try:
        return {group._get_backend(d).options._timeout for d in group._device_types}
    except (AttributeError, RuntimeError):
        return None


# How gloo and NCCL word errors that leave a process group unusable (they raise plain
# RuntimeErrors, not torch.distributed.DistError).
_GROUP_ERROR_MARKS = (
    "gloo/transport/",  # the source path gloo puts in front of its messages
    "pair closure",
    "Connection closed by peer",
    "Connection reset by peer",
    "NCCL error",
    "ProcessGroupNCCL",
)


def exception_chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc`` and what caused it, outermost first (each once: chains can loop)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def breaks_process_group(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) came from the process group's backend."""
    return any(
        isinstance(e, dist.DistError)
        or (isinstance(e, RuntimeError) and any(m in str(e) for m in _GROUP_ERROR_MARKS))
        for e in exception_chain(exc)
    )


_NO_DEFAULT_GROUP = "Default process group has not been initialized"


def needs_default_group(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is torch's error for a call that needs the
    default group where none was started (``dist.barrier()`` with no group)."""
    return any(_NO_DEFAULT_GROUP in str(e) for e in exception_chain(exc))


_GROUP_TWICE = "trying to initialize the default process group twice"
INIT_TWICE_HINT = (
    "rankgate: the ranks of a world test already share the default process group (rankgate "
    "started it). Code that starts its own (a trainer's setup calling init_process_group) "
    "should skip that when torch.distributed.is_initialized() is true; or drop the world "
    "marker from a test that starts ranks of its own."
)


_FD_NOT_SENT = "Failed to send fd"
SEND_FD_HINT = (
    "rankgate: torch's symmetric memory passes file descriptors between the ranks of one "
    "host over a socket under TMPDIR; it fails this way when those ranks have different "
    "temp dirs (a per-process TMPDIR). Give every rank on a host the same TMPDIR."
)


def hint_for(exc: BaseException) -> str:
    """What to do about a failure the harness itself explains ("" for any other)."""
    if isinstance(exc, ValueError) and _GROUP_TWICE in str(exc):
        return INIT_TWICE_HINT
    # A wrapper's cause may be torch's error.
    if any(isinstance(e, RuntimeError) and _FD_NOT_SENT in str(e) for e in exception_chain(exc)):
        return SEND_FD_HINT
    return ""


class WorkerSetupError(RankgateError, RuntimeError):
    """The ini option rankgate_worker_setup names what cannot be imported."""


def call_worker_setup(spec: str | None, rank: int) -> None:
    """Call the ini option rankgate_worker_setup's ``module:function`` as function(rank):
    in a pool's rank before it joins the group, in place as the session starts."""
    if not spec:
        return
    module_name, _, name = spec.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise WorkerSetupError(
            f"ini option rankgate_worker_setup = {spec}: {type(exc).__name__}: {exc}"
        ) from exc
    function(rank)


_accelerators: tuple | None = None


def accelerators() -> tuple:
    """The accelerator modules this process has (``torch.cuda``, ``torch.xpu``,
    ``torch.mps``), asked once. The first ``is_available()`` starts the driver, seconds on
    a busy GPU host: a pool rank asks as it starts, before any test's timeout runs (a
    gloo test's 2 s timeout once ran out inside it), and every test's seeding reuses it."""
    global _accelerators
    if _accelerators is None:
        found = [a for a in (torch.cuda, getattr(torch, "xpu", None)) if a and a.is_available()]
        if torch.backends.mps.is_available():
            found.append(torch.mps)
        _accelerators = tuple(found)
    return _accelerators


def seed_everything(seed: int) -> None:
    random.seed(seed)
    # Not torch.manual_seed: it seeds every accelerator torch knows (CUDA, XPU, MTIA...),
    # and queues the call for each one not started with a formatted stack: 0.3-0.8 ms
    # per test on every rank. The CPU generator, and the accelerators this host has.
    torch.default_generator.manual_seed(seed)
    for accelerator in accelerators():
        if accelerator is torch.mps:
            accelerator.manual_seed(seed)
        else:
            accelerator.manual_seed_all(seed)  # lazily if not started yet, as torch does
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed % 2**32)


_SEEDED_BY_RANKGATE = "_rankgate_hypothesis_seed"


def same_examples_on_every_rank(test, seed: int) -> None:
    """A Hypothesis test draws its examples from a random source of its own in each
    process: ranks would draw different ones, and their collectives would not match
    (gloo aborts: "Received data size doesn't match expected size"). Given the test's
    seed, as with Hypothesis's own ``@seed``, every rank draws the same examples. A
    seed the test chose itself is kept."""
    function = getattr(test, "__func__", test)  # a method: the function under it
    if not getattr(function, "is_hypothesis_test", False):
        return
    hypothesis_bridge.agree_on_each_example(function)
    chosen = getattr(function, "_hypothesis_internal_use_seed", None)
    if chosen is not None and getattr(function, _SEEDED_BY_RANKGATE, None) != chosen:
        return  # the test's own @seed(...)
    import hypothesis

    hypothesis.seed(seed)(function)
    setattr(function, _SEEDED_BY_RANKGATE, seed)


class EnvironmentSnapshot:
    """os.environ as a test found it. The raw mapping under it is copied and compared
    as one C-level dict: the str view decodes every name and value at each step, about
    half a millisecond a test with a few hundred variables."""

    def __init__(self) -> None:
        self._raw = getattr(os.environ, "_data", None)
        self._saved = self._raw.copy() if self._raw is not None else dict(os.environ)

    def changed(self) -> bool:
        if self._raw is not None:
            return self._raw != self._saved
        return os.environ != self._saved

    def restore(self) -> None:
        os.environ.clear()
        if self._raw is None:
            os.environ.update(self._saved)
            return
        for name, value in self._saved.items():  # through os.environ: putenv too
            os.environ[os.fsdecode(name)] = os.fsdecode(value)


def reset_state(saved_env: EnvironmentSnapshot, saved_cwd: str) -> None:
    """Undo what a test body may leak into the next one on this rank.

    The groups it made go later, with :func:`destroy_subgroups`, once every rank has
    finished the test: a rank that destroys a new group at once can close its sockets
    while a slower peer is still connecting to it (gloo: "connectFullMesh failed ...
    Connection closed by peer"; seen under load).
    """
    if saved_env.changed():
        saved_env.restore()
    if os.getcwd() != saved_cwd:
        os.chdir(saved_cwd)
    torch.set_default_dtype(torch.float32)
    if hasattr(torch, "get_default_device") and torch.get_default_device().type != "cpu":
        torch.set_default_device(None)
    torch.set_grad_enabled(True)
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def destroy_subgroups(keep: tuple = ()) -> None:
    """Destroy every group but the default one (and ``keep``) that a test left.

    Call it only when every rank has finished that test (see :func:`reset_state`).
    """
    if not dist.is_initialized():
        return
    from torch.distributed.distributed_c10d import _world

    default = dist.GroupMember.WORLD
    doomed = [g for g in list(_world.pg_map) if g is not default and g not in keep]
    if doomed:
        forget_dtensor_meshes()
    for group in doomed:
        dist.destroy_process_group(group)


def forget_dtensor_meshes() -> None:
    """Empty DTensor's sharding-propagation caches before a test's groups go.

    Those caches key on DeviceMesh equality, which compares ranks, device type and dim
    names but not process groups. Where a mesh gets a group of its own (init_device_mesh
    on a GPU host whose default group is gloo makes a new one), the next test's equal
    mesh hits the cache and its DTensors come back on the old mesh, whose group is
    destroyed: "Could not resolve the process group registered under the name N".
    """
    if "torch.distributed.tensor" not in sys.modules:
        return  # nothing was cached: DTensor was never imported
    try:
        from torch.distributed.tensor.debug import _clear_sharding_prop_cache
    except ImportError:  # older torch: the Python cache only
        from torch.distributed.tensor import DTensor

        propagator = DTensor._op_dispatcher.sharding_propagator
        propagator.propagate_op_sharding.cache_clear()
        return
    _clear_sharding_prop_cache()
