"""Which GPUs can reach which: the peer-access matrix and the link topology.

``detect_topology()`` asks CUDA (``torch.cuda.can_device_access_peer``) for every
ordered pair of the GPUs in question and, where ``nvidia-smi topo -m`` can be run
and read, the kind of link between them (``NV18``, ``PIX``, ``SYS`` ...). It never
raises for a machine that simply has fewer GPUs than asked: zero or one GPU, fewer
than requested, or access that works one way only are all ordinary answers, and
``Topology.p2p_problem()`` says in one sentence why peer-to-peer cannot be used.

CUDA is reached through a small probe object so tests can describe any machine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol


class CudaProbe(Protocol):
    """What detection needs from CUDA; ``TorchCudaProbe`` is the real one."""

    def device_count(self) -> int: ...

    def device_name(self, index: int) -> str: ...

    def can_access_peer(self, src: int, dst: int) -> bool: ...


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
    """links[i][j] from ``nvidia-smi topo -m`` ("X" on the diagonal); None if unread."""
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
    topo_text: Callable[[], str | None] | None = None,
    visible_env: str | None = None,
) -> Topology:
    """Peer access among the first ``requested`` visible GPUs (all when None).

    ``probe`` and ``topo_text`` replace CUDA and ``nvidia-smi`` in tests;
    ``visible_env`` replaces the CUDA_VISIBLE_DEVICES value used to map nvidia-smi's
    physical indices onto visible ones.
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
    links, note = _links_for(devices, topo_text or _run_nvidia_smi_topo, visible_env)
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


def _run_nvidia_smi_topo() -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run(
            [exe, "topo", "-m"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_topo_matrix(text: str) -> dict[tuple[int, int], str]:
    """Parse ``nvidia-smi topo -m`` into {(physical i, physical j): link}.

    Only GPU rows and GPU columns are kept (NIC columns and the affinity columns
    are skipped); raises ValueError when no GPU header is found.
    """
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header_cols: list[str] | None = None
    out: dict[tuple[int, int], str] = {}
    for line in lines:
        tokens = line.split()
        if not tokens:
            continue
        if header_cols is None:
            if tokens[0].startswith("GPU") and tokens[0][3:].isdigit():
                header_cols = tokens
            continue
        if tokens[0] == "Legend:":
            break
        name = tokens[0]
        if not (name.startswith("GPU") and name[3:].isdigit()):
            continue
        src = int(name[3:])
        for col, value in zip(header_cols, tokens[1:]):
            if col.startswith("GPU") and col[3:].isdigit():
                out[(src, int(col[3:]))] = value
    if header_cols is None:
        raise ValueError("no GPU header line in nvidia-smi topo -m output")
    return out


def _physical_indices(count: int, visible_env: str | None) -> list[int] | None:
    """Physical GPU index of each visible index, or None if CUDA_VISIBLE_DEVICES uses UUIDs."""
    if visible_env is None or visible_env.strip() == "":
        return list(range(count))
    parts = [p.strip() for p in visible_env.split(",") if p.strip()]
    if not all(p.isdigit() for p in parts):
        return None
    return [int(p) for p in parts[:count]]


def _links_for(
    devices: Sequence[int],
    topo_text: Callable[[], str | None],
    visible_env: str | None,
) -> tuple[tuple[tuple[str, ...], ...] | None, str]:
    if not devices:
        return None, "no GPUs examined"
    text = topo_text()
    if text is None:
        return None, "nvidia-smi topo -m not available"
    try:
        table = parse_topo_matrix(text)
    except ValueError as exc:
        return None, f"nvidia-smi topo -m unreadable: {exc}"
    env = visible_env if visible_env is not None else os.environ.get("CUDA_VISIBLE_DEVICES")
    physical = _physical_indices(len(devices), env)
    if physical is None or len(physical) < len(devices):
        return None, "CUDA_VISIBLE_DEVICES is not a list of indices; links not mapped"
    try:
        links = tuple(
            tuple(table[(physical[i], physical[j])] for j in range(len(devices)))
            for i in range(len(devices))
        )
    except KeyError as exc:
        return None, f"nvidia-smi topo -m has no entry for GPU pair {exc}"
    return links, "nvidia-smi topo -m"
