"""The kind of link between GPUs, from NVML, in ``nvidia-smi topo -m``'s words.

``nvml_links(uuids)`` answers for the GPUs with those UUIDs (so CUDA_VISIBLE_DEVICES,
by index or by UUID, needs no mapping): ``NV<n>`` where the pair shares n active
NVLinks, directly or both through NVSwitches, else the PCIe path from their common
ancestor (``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``), and ``X`` on the diagonal.
NVML comes from nvidia-ml-py (``import pynvml``) and the driver's libnvidia-ml; where
either is missing, or NVML refuses, :class:`LinksUnavailable` says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

from rankgate.errors import RankgateError

_PCIE = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
"""NVML_TOPOLOGY_* common-ancestor levels as nvidia-smi names them (0: the same board)."""
_GPU, _SWITCH = 0x00, 0x02  # NVML_NVLINK_DEVICE_TYPE_GPU / _SWITCH


class LinksUnavailable(RankgateError):
    """NVML cannot say how these GPUs are linked; the message says why."""


def nvml_links(uuids: Sequence[str], nvml: ModuleType | None = None) -> tuple[tuple[str, ...], ...]:
    """links[i][j] for the GPUs ``uuids`` ("GPU-..." as NVML and nvidia-smi -L write them).

    ``nvml`` replaces the pynvml module in tests. Raises :class:`LinksUnavailable`.
    """
    nvml = nvml or _import_pynvml()
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise LinksUnavailable(f"NVML did not start: {exc}") from None
    try:
        handles = [nvml.nvmlDeviceGetHandleByUUID(uuid) for uuid in uuids]
        buses = [_pci_address(nvml.nvmlDeviceGetPciInfo(h)) for h in handles]
        remotes = [_nvlink_remotes(nvml, h, buses) for h in handles]
        return tuple(
            tuple(_link(nvml, handles, buses, remotes, i, j) for j in range(len(uuids)))
            for i in range(len(uuids))
        )
    except nvml.NVMLError as exc:
        raise LinksUnavailable(f"NVML: {exc}") from None
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def _import_pynvml() -> ModuleType:
    try:
        import pynvml
    except ImportError:
        raise LinksUnavailable("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from None
    return pynvml


def _pci_address(info) -> tuple[int, int, int]:
    return int(info.domain), int(info.bus), int(info.device)


def _nvlink_remotes(nvml, handle, buses) -> list[tuple[tuple[int, int, int] | None, int]]:
    """(remote PCI address, remote device type) of each active NVLink of one GPU."""
    out = []
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                continue
        except nvml.NVMLError:  # no such link on this GPU (or no NVLink at all)
            continue
        try:
            remote = _pci_address(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link))
        except nvml.NVMLError:  # an active link whose far end NVML does not show
            remote = None
        try:
            kind = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
        except nvml.NVMLError:  # older drivers: a peer we know by address, else a switch
            kind = _GPU if remote in buses else _SWITCH
        out.append((remote, kind))
    return out


def _nvlink_p2p(nvml, a, b) -> bool:
    """Whether NVML reports NVLink peer-to-peer between two GPUs (one switch fabric)."""
    try:
        status = nvml.nvmlDeviceGetP2PStatus(a, b, nvml.NVML_P2P_CAPS_INDEX_NVLINK)
    except nvml.NVMLError:
        return True  # not answered: links to switches on both sides are the best evidence
    return status == nvml.NVML_P2P_STATUS_OK


def _link(nvml, handles, buses, remotes, i: int, j: int) -> str:
    if i == j:
        return "X"
    direct = sum(1 for address, _ in remotes[i] if address == buses[j])
    if direct:
        return f"NV{direct}"
    via_i = sum(1 for _, kind in remotes[i] if kind == _SWITCH)
    via_j = sum(1 for _, kind in remotes[j] if kind == _SWITCH)
    if via_i and via_j and _nvlink_p2p(nvml, handles[i], handles[j]):
        return f"NV{min(via_i, via_j)}"
    level = nvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])
    return _PCIE.get(level, f"PCIe level {level}")
