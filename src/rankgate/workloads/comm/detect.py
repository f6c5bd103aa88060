"""Which GPUs can reach which: the peer-access matrix and the link topology.

``detect_topology()`` asks CUDA (``torch.cuda.can_device_access_peer``) for every
ordered pair of the GPUs in question and, where NVML answers, the kind of link between
them in ``nvidia-smi topo -m``'s words (``NV18``, ``PIX``, ``SYS`` ...; see ``links``). It never
raises for a machine that simply has fewer GPUs than asked: zero or one GPU, fewer
than requested, or access that works one way only are all ordinary answers, and
``Topology.p2p_problem()`` says in one sentence why peer-to-peer cannot be used.

CUDA and NVML are reached through a probe object and a link reader, so tests can
describe any machine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .links import LinksUnavailable, nvml_links

LinkReader = Callable[[Sequence[str]], tuple[tuple[str, ...], ...]]
"""Links among the GPUs of the given UUIDs; raises LinksUnavailable (``nvml_links``)."""


class CudaProbe(Protocol):
    """What detection needs from CUDA; ``TorchCudaProbe`` is the real one."""

    def device_count(self) -> int: ...

    def device_name(self, index: int) -> str: ...

    def can_access_peer(self, src: int, dst: int) -> bool: ...

    def device_uuid(self, index: int) -> str: ...


class TorchCudaProbe:
    """CUDA as torch sees it (honours CUDA_VISIBLE_DEVICES)."""

    def device_count(self) -> int:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0

    def device_name(self, index: int) -> str:
        import torch

        return torch.cuda.get_device_name(index)

    def can_access_peer(self, src: int, dst: int) -> bool:
        import torch

        return bool(torch.cuda.can_device_access_peer(src, dst))

    def device_uuid(self, index: int) -> str:
        import torch

        uuid = str(torch.cuda.get_device_properties(index).uuid)
        return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"  # NVML's spelling


@dataclass(frozen=True, slots=True, kw_only=True)
class Topology:
    """The GPUs a job would use and how they are connected."""

    visible: int
    """GPUs visible to this process."""
    requested: int | None
    """GPUs the caller wanted (None: all visible)."""
    devices: tuple[int, ...]
    """Indices examined: the first min(requested, visible) visible GPUs."""
    names: tuple[str, ...] = ()
    """Device name of each examined GPU."""
    peer_access: tuple[tuple[bool, ...], ...] = ()
    """peer_access[i][j]: devices[i] can read and write devices[j] (diagonal True)."""
    links: tuple[tuple[str, ...], ...] | None = None
    """links[i][j] as ``nvidia-smi topo -m`` names them ("X" on the diagonal); None if unread."""
    links_note: str = ""
    """Where links came from, or why they could not be read."""
    errors: tuple[str, ...] = field(default=())
    """Peer queries that failed, as text (a failed query counts as no access)."""

    @property
    def shortfall(self) -> int:
        """How many requested GPUs are missing (0 when enough are visible)."""
        if self.requested is None:
            return 0
        return max(0, self.requested - self.visible)

    def missing_pairs(self) -> list[tuple[int, int]]:
        """Ordered (src, dst) device pairs without peer access."""
        return [
            (self.devices[i], self.devices[j])
            for i in range(len(self.devices))
            for j in range(len(self.devices))
            if i != j and not self.peer_access[i][j]
        ]

    def asymmetric_pairs(self) -> list[tuple[int, int]]:
        """Pairs (a, b), a < b, where access works in one direction only."""
        n = len(self.devices)
        return [
            (self.devices[i], self.devices[j])
            for i in range(n)
            for j in range(i + 1, n)
            if self.peer_access[i][j] != self.peer_access[j][i]
        ]

    def p2p_problem(self) -> str | None:
        """Why peer-to-peer among ``devices`` is impossible, or None when it is possible."""
        if self.visible == 0:
            return "no CUDA GPU is visible"
        if self.shortfall:
            return f"{self.requested} GPUs requested but only {self.visible} visible"
        if len(self.devices) < 2:
            return "peer-to-peer needs at least 2 GPUs; 1 is in use"
        missing = self.missing_pairs()
        if missing:
            shown = ", ".join(f"GPU{a}->GPU{b}" for a, b in missing[:6])
            more = f" (+{len(missing) - 6} more)" if len(missing) > 6 else ""
            kind = "asymmetric peer access" if self.asymmetric_pairs() else "no peer access"
            return f"{kind}: {shown}{more}"
        return None

    def as_dict(self) -> dict:
        """JSON-ready form (used by env-check and benchmark results)."""
        return {
            "visible": self.visible,
            "requested": self.requested,
            "devices": list(self.devices),
            "names": list(self.names),
            "peer_access": [list(row) for row in self.peer_access],
            "links": None if self.links is None else [list(r) for r in self.links],
            "links_note": self.links_note,
            "p2p_problem": self.p2p_problem(),
            "errors": list(self.errors),
        }

    def format_matrix(self) -> str:
        """Human table: peer access (Y/N) and, where known, the link kind."""
        if not self.devices:
            return "no GPUs"
        head = "      " + " ".join(f"{'GPU' + str(d):>8}" for d in self.devices)
        rows = [head]
        for i, d in enumerate(self.devices):
            cells = []
            for j in range(len(self.devices)):
                if i == j:
                    cell = "X"
                else:
                    cell = "Y" if self.peer_access[i][j] else "N"
                    if self.links is not None:
                        cell += f"/{self.links[i][j]}"
                cells.append(f"{cell:>8}")
            rows.append(f"{'GPU' + str(d):<6}" + " ".join(cells))
        return "\n".join(rows)


def detect_topology(
    requested: int | None = None,
    *,
    probe: CudaProbe | None = None,
    read_links: LinkReader | None = nvml_links,
) -> Topology:
    """Peer access among the first ``requested`` visible GPUs (all when None).

    ``probe`` replaces CUDA and ``read_links`` NVML in tests; ``read_links=None`` skips
    the links (peer access is all that routing needs).
    """
    if requested is not None and requested < 0:
        raise ValueError(f"requested GPU count must be >= 0, got {requested}")
    probe = probe or TorchCudaProbe()
    visible = probe.device_count()
    count = visible if requested is None else min(requested, visible)
    devices = tuple(range(count))
    errors: list[str] = []
    matrix: list[tuple[bool, ...]] = []
    for i in devices:
        row = []
        for j in devices:
            if i == j:
                row.append(True)
                continue
            try:
                row.append(bool(probe.can_access_peer(i, j)))
            except Exception as exc:  # a failed query is reported, and means no access
                errors.append(f"can_device_access_peer({i}, {j}) failed: {exc}")
                row.append(False)
        matrix.append(tuple(row))
    names = tuple(probe.device_name(i) for i in devices)
    links, note = _links_for(devices, probe, read_links)
    return Topology(
        visible=visible,
        requested=requested,
        devices=devices,
        names=names,
        peer_access=tuple(matrix),
        links=links,
        links_note=note,
        errors=tuple(errors),
    )


def _links_for(
    devices: Sequence[int], probe: CudaProbe, read_links: LinkReader | None
) -> tuple[tuple[tuple[str, ...], ...] | None, str]:
    if not devices:
        return None, "no GPUs examined"
    if read_links is None:
        return None, "not asked for"
    try:
        uuids = [probe.device_uuid(i) for i in devices]
        return read_links(uuids), "NVML"
    except LinksUnavailable as exc:
        return None, str(exc)
    except Exception as exc:  # a UUID CUDA would not give: links stay unknown, never fatal
        return None, f"GPU UUIDs unavailable: {exc}"
