"""Choosing a backend: ``auto`` (p2p, then nccl, then gloo) or a name, the same on every rank.

Each rank writes what it knows about itself to the process group's store (host,
GPU, peer access to the host's GPUs, whether NCCL and symmetric memory are there,
whether p2p is switched off by ``RANKGATE_DISABLE_P2P``), reads every other rank's
entry, and runs the same pure function ``decide`` on the same list, so all ranks
reach the same choice without a collective on a backend that might not work. Under
``auto`` every backend passed over is logged with its reason; a named backend that
cannot run raises ``BackendUnavailableError`` with the reason on every rank.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from .backend import (
    BackendUnavailableError,
    CollectiveTimeoutError,
    CommBackend,
    GlooBackend,
    NcclBackend,
    UnknownBackendError,
    log,
)
from .p2p import (
    P2PBackend,
    P2PConfig,
    disabled_by_env,
    local_member,
    peer_problem,
    symm_mem_problem,
)

AUTO_ORDER = ("p2p", "nccl", "gloo")
"""Preference of ``auto``: the first one every rank can use wins."""

BACKEND_ENV = "RANKGATE_COMM_BACKEND"
"""Backend name used when the caller passes none (default: auto)."""

_REGISTRY: dict[str, type[CommBackend]] = {
    "p2p": P2PBackend,
    "nccl": NcclBackend,
    "gloo": GlooBackend,
}
_rounds: dict[str, int] = {}


def registry() -> dict[str, type[CommBackend]]:
    """A copy of the name -> backend class table."""
    return dict(_REGISTRY)


def valid_names() -> tuple[str, ...]:
    return ("auto", *_REGISTRY)


def validate_name(name: str | None) -> str:
    """The normalised backend name; None reads ``RANKGATE_COMM_BACKEND`` (default auto)."""
    if name is None:
        name = os.environ.get(BACKEND_ENV, "auto")
    key = str(name).strip().lower()
    if key not in valid_names():
        raise UnknownBackendError(
            f"unknown comm backend {name!r}; valid backends: {', '.join(valid_names())}"
        )
    return key


@dataclass(frozen=True, slots=True, kw_only=True)
class Selection:
    """The backend every rank agreed on, and why others were passed over."""

    name: str
    requested: str
    passed_over: dict[str, str] = field(default_factory=dict)
    """Backend -> reason, for each one ``auto`` preferred but could not use."""
    problems: dict[str, str | None] = field(default_factory=dict)
    """Backend -> reason it cannot run here (None: it can)."""


def local_facts(device: torch.device | None, group_backend: str | None = None) -> dict:
    """What this rank contributes to the decision (JSON-serialisable).

    ``group_backend``: the backend of the group ``auto`` selects for. A group without
    NCCL (a gloo world, e.g. a test marked ``backend="gloo"`` on a GPU host) keeps
    ``auto`` on gloo: it honours the group it is given. Naming nccl or p2p still makes
    a dedicated NCCL group where the GPUs allow it.
    """
    facts = local_member(device)
    facts["nccl"] = None
    if device is None or device.type != "cuda":
        facts["nccl"] = "no CUDA device" if not torch.cuda.is_available() else "rank uses the CPU"
    elif not dist.is_nccl_available():
        facts["nccl"] = "this torch build has no NCCL"
    facts["p2p"] = disabled_by_env() or symm_mem_problem()
    facts["group"] = None
    if group_backend is not None and "nccl" not in group_backend:
        facts["group"] = f"the process group is {group_backend}, without NCCL"
    return facts


def _first(facts: list[dict], key: str) -> str | None:
    for r, f in enumerate(facts):
        if f.get(key):
            return f"rank {r}: {f[key]}"
    return None


def problems_of(facts: list[dict], requested: str = "auto") -> dict[str, str | None]:
    """Backend -> why it cannot run on these ranks (None: it can)."""
    nccl = _first(facts, "nccl")
    if nccl is None and requested == "auto":
        # auto keeps the group it is given, whatever GPUs the ranks sit on: say so first
        # (a gloo pool's ranks all sit on GPU 0, so sharing would be named instead)
        nccl = _first(facts, "group")
    if nccl is None:
        seen: dict[tuple, int] = {}
        for r, f in enumerate(facts):
            key = (f["host"], f["device"])
            if key in seen:
                nccl = f"ranks {seen[key]} and {r} share GPU{f['device']} on {f['host']}"
                break
            seen[key] = r
    p2p = _first(facts, "p2p")
    if p2p is None:
        p2p = f"needs nccl for fallback, which cannot run ({nccl})" if nccl else peer_problem(facts)
    return {"p2p": p2p, "nccl": nccl, "gloo": None}


def decide(requested: str, facts: list[dict]) -> Selection:
    """The pure decision every rank runs on the same facts."""
    requested = validate_name(requested)
    problems = problems_of(facts, requested)
    if requested != "auto":
        if problems[requested]:
            raise BackendUnavailableError(
                f"{requested} requested but cannot run: {problems[requested]}"
            )
        return Selection(name=requested, requested=requested, problems=problems)
    passed: dict[str, str] = {}
    for name in AUTO_ORDER:
        reason = problems[name]
        if reason is None:
            return Selection(name=name, requested="auto", passed_over=passed, problems=problems)
        passed[name] = reason
    raise BackendUnavailableError(f"no comm backend can run: {passed}")  # gloo always can


def exchange_facts(
    mine: dict,
    *,
    store: dist.Store,
    rank: int,
    world_size: int,
    tag: str,
    timeout: float = 120.0,
) -> list[dict]:
    """Publish this rank's facts under ``tag`` and return every rank's, in rank order."""
    keys = [f"rankgate/comm/select/{tag}/{r}" for r in range(world_size)]
    store.set(keys[rank], json.dumps(mine))
    try:
        store.wait(keys, timedelta(seconds=timeout))
    except Exception as exc:
        raise CollectiveTimeoutError(
            f"backend selection: not every rank published its facts within {timeout} s "
            f"(keys {keys[0]}..): {exc}"
        ) from exc
    return [json.loads(store.get(k)) for k in keys]


def _default_device() -> torch.device | None:
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return None


def select_backend(
    requested: str | None = None,
    *,
    group: dist.ProcessGroup | None = None,
    device: torch.device | str | None = None,
    store: dist.Store | None = None,
    timeout: float = 120.0,
) -> Selection:
    """Agree with the other ranks of ``group`` (default: all) on one backend."""
    requested = validate_name(requested)
    group = group or dist.group.WORLD
    dev = torch.device(device) if device is not None else _default_device()
    store = store or dist.distributed_c10d._get_default_store()
    name = group.group_name
    _rounds[name] = _rounds.get(name, 0) + 1
    facts = exchange_facts(
        local_facts(dev, dist.get_backend(group)),
        store=store,
        rank=dist.get_rank(group),
        world_size=dist.get_world_size(group),
        tag=f"{name}/{_rounds[name]}",
        timeout=timeout,
    )
    selection = decide(requested, facts)
    for skipped, reason in selection.passed_over.items():
        log.warning("comm backend auto: not %s (%s)", skipped, reason)
    log.info("comm backend: %s (requested %s)", selection.name, requested)
    return selection


def create_backend(
    requested: str | None = None,
    *,
    group: dist.ProcessGroup | None = None,
    device: torch.device | str | None = None,
    timeout: float | None = None,
    check_shapes: bool = True,
    p2p_config: P2PConfig | None = None,
) -> CommBackend:
    """Select a backend with the other ranks (collective) and create it.

    ``device`` is this rank's GPU (default: the current CUDA device); the gloo
    backend always works on the CPU. The returned backend carries ``selection``.
    """
    selection = select_backend(requested, group=group, device=device)
    kwargs: dict = {"group": group, "timeout": timeout, "check_shapes": check_shapes}
    if selection.name != "gloo":
        kwargs["device"] = device
    if selection.name == "p2p":
        kwargs.update(config=p2p_config, verified=True)
    backend = _REGISTRY[selection.name](**kwargs)
    backend.selection = selection
    return backend
