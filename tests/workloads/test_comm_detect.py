"""Peer-access detection on described machines: 0, 1, n GPUs, shortfalls, asymmetry, links.

Links come from NVML; here a small stand-in describes machines NVML would (this
machine has no driver). On a GPU host, ``test_nvml_links_agree_with_nvidia_smi``
compares the real NVML's answer with ``nvidia-smi topo -m``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from types import SimpleNamespace

import pytest

from rankgate.workloads.comm.detect import detect_topology
from rankgate.workloads.comm.links import LinksUnavailable, nvml_links

pytestmark = pytest.mark.unit


class FakeCuda:
    """A machine described by its GPU count and the pairs (src, dst) that have access."""

    def __init__(self, count: int, access: set[tuple[int, int]] | None = None, fail=()):
        self.count = count
        self.access = (
            access
            if access is not None
            else {(i, j) for i in range(count) for j in range(count) if i != j}
        )
        self.fail = set(fail)
        self.queries: list[tuple[int, int]] = []

    def device_count(self) -> int:
        return self.count

    def device_name(self, index: int) -> str:
        return f"Fake GPU {index}"

    def can_access_peer(self, src: int, dst: int) -> bool:
        self.queries.append((src, dst))
        if (src, dst) in self.fail:
            raise RuntimeError("driver said no")
        return (src, dst) in self.access

    def device_uuid(self, index: int) -> str:
        return f"GPU-{index:04d}"


def _no_links(uuids):
    raise LinksUnavailable("nvidia-ml-py is not installed (pip install nvidia-ml-py)")


def _detect(cuda, requested=None, read_links=_no_links):
    return detect_topology(requested, probe=cuda, read_links=read_links)


def test_no_gpu():
    topo = _detect(FakeCuda(0))
    assert topo.devices == () and topo.peer_access == ()
    assert topo.p2p_problem() == "no CUDA GPU is visible"
    assert topo.links is None and topo.links_note == "no GPUs examined"
    assert topo.format_matrix() == "no GPUs"


def test_one_gpu():
    cuda = FakeCuda(1)
    topo = _detect(cuda)
    assert topo.devices == (0,) and topo.peer_access == ((True,),)
    assert cuda.queries == []  # the diagonal is never asked
    assert "at least 2 GPUs" in topo.p2p_problem()


def test_fewer_gpus_than_requested():
    topo = _detect(FakeCuda(2), requested=4)
    assert topo.devices == (0, 1)
    assert topo.shortfall == 2
    assert topo.p2p_problem() == "4 GPUs requested but only 2 visible"


def test_requested_subset_only_queries_those():
    cuda = FakeCuda(8)
    topo = _detect(cuda, requested=2)
    assert topo.devices == (0, 1)
    assert sorted(cuda.queries) == [(0, 1), (1, 0)]
    assert topo.p2p_problem() is None


def test_full_access():
    topo = _detect(FakeCuda(4))
    assert topo.missing_pairs() == [] and topo.asymmetric_pairs() == []
    assert topo.p2p_problem() is None
    assert all(all(row) for row in topo.peer_access)


def test_asymmetric_access_is_named():
    access = {(0, 1), (1, 0), (0, 2), (2, 0), (1, 2)}  # 2 cannot reach 1
    topo = _detect(FakeCuda(3, access))
    assert topo.peer_access[1][2] is True and topo.peer_access[2][1] is False
    assert topo.missing_pairs() == [(2, 1)]
    assert topo.asymmetric_pairs() == [(1, 2)]
    assert topo.p2p_problem() == "asymmetric peer access: GPU2->GPU1"


def test_no_access_at_all():
    topo = _detect(FakeCuda(2, access=set()))
    assert topo.p2p_problem() == "no peer access: GPU0->GPU1, GPU1->GPU0"


def test_failed_query_counts_as_no_access_and_is_reported():
    topo = _detect(FakeCuda(2, fail={(0, 1)}))
    assert topo.peer_access[0][1] is False
    assert topo.errors == ("can_device_access_peer(0, 1) failed: driver said no",)


def test_negative_request_is_an_error():
    with pytest.raises(ValueError, match="requested GPU count must be >= 0"):
        _detect(FakeCuda(2), requested=-1)


class FakeNvml(SimpleNamespace):
    """NVML's few calls, for a machine given as GPUs (UUID -> PCI bus) and NVLinks.

    ``nvlinks[uuid]``: one (remote bus, remote type) per active link; ``ancestor``:
    the PCIe common-ancestor level of every pair without NVLink.
    """

    class NVMLError(Exception):
        pass

    NVML_NVLINK_MAX_LINKS = 18
    NVML_FEATURE_ENABLED = 1
    NVML_P2P_CAPS_INDEX_NVLINK = 2
    NVML_P2P_STATUS_OK = 0

    def __init__(self, buses, nvlinks=None, ancestor=50, fail_init=False, typeless=False):
        super().__init__(buses=buses, nvlinks=nvlinks or {}, ancestor=ancestor,
                         fail_init=fail_init, typeless=typeless, calls=[])  # fmt: skip

    def nvmlInit(self):
        self.calls.append("init")
        if self.fail_init:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid not in self.buses:
            raise self.NVMLError("Not Found")
        return uuid

    def nvmlDeviceGetPciInfo(self, handle):
        return SimpleNamespace(domain=0, bus=self.buses[handle], device=0)

    def _links(self, handle, link):
        links = self.nvlinks.get(handle, [])
        if link >= len(links):
            raise self.NVMLError("Not Supported")
        return links[link]

    def nvmlDeviceGetNvLinkState(self, handle, link):
        self._links(handle, link)
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle, link):
        return SimpleNamespace(domain=0, bus=self._links(handle, link)[0], device=0)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle, link):
        if self.typeless:
            raise self.NVMLError("Function Not Found")
        return self._links(handle, link)[1]

    def nvmlDeviceGetP2PStatus(self, a, b, index):
        assert index == self.NVML_P2P_CAPS_INDEX_NVLINK
        return 0

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return self.ancestor


GPU, SWITCH = 0, 2


def test_links_direct_nvlinks_are_counted():
    # two GPUs bridged by 4 NVLinks (an NVLink bridge), as nvidia-smi's NV4
    nvml = FakeNvml({"GPU-0000": 0x18, "GPU-0001": 0x2A},
                    {"GPU-0000": [(0x2A, GPU)] * 4, "GPU-0001": [(0x18, GPU)] * 4})  # fmt: skip
    topo = _detect(FakeCuda(2), read_links=lambda u: nvml_links(u, nvml))
    assert topo.links == (("X", "NV4"), ("NV4", "X")) and topo.links_note == "NVML"
    assert "Y/NV4" in topo.format_matrix()
    assert nvml.calls == ["init", "shutdown"]


@pytest.mark.parametrize("typeless", [False, True])
def test_links_through_nvswitches(typeless):
    """HGX boards: every link goes to a switch; nvidia-smi calls that NV18 for every pair."""
    buses = {f"GPU-{i:04d}": 0x10 + i for i in range(4)}
    links = {u: [(0xF0 + k % 4, SWITCH) for k in range(18)] for u in buses}
    nvml = FakeNvml(buses, links, typeless=typeless)
    topo = _detect(FakeCuda(4), read_links=lambda u: nvml_links(u, nvml))
    assert topo.links[0] == ("X", "NV18", "NV18", "NV18") and topo.links[3][2] == "NV18"


@pytest.mark.parametrize(("level", "name"), [(10, "PIX"), (20, "PXB"), (30, "PHB"),
                                             (40, "NODE"), (50, "SYS")])  # fmt: skip
def test_links_over_pcie_take_nvidia_smi_names(level, name):
    nvml = FakeNvml({"GPU-0000": 1, "GPU-0001": 2}, ancestor=level)
    topo = _detect(FakeCuda(2), read_links=lambda u: nvml_links(u, nvml))
    assert topo.links == (("X", name), (name, "X"))


def test_links_unavailable_say_why():
    topo = _detect(FakeCuda(2))
    assert topo.links is None
    assert topo.links_note == "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    nvml = FakeNvml({}, fail_init=True)
    topo = _detect(FakeCuda(2), read_links=lambda u: nvml_links(u, nvml))
    assert (topo.links, topo.links_note) == (None, "NVML did not start: Driver Not Loaded")
    nvml = FakeNvml({"GPU-0000": 1})  # the second GPU is not NVML's
    topo = _detect(FakeCuda(2), read_links=lambda u: nvml_links(u, nvml))
    assert (topo.links, topo.links_note) == (None, "NVML: Not Found")
    assert nvml.calls == ["init", "shutdown"]
    assert _detect(FakeCuda(2), read_links=None).links_note == "not asked for"


def _smi_topo(text: str) -> dict[tuple[int, int], str]:
    """GPU-to-GPU cells of ``nvidia-smi topo -m`` (the test's oracle for NVML's answer)."""
    rows = [re.sub(r"\x1b\[[0-9;]*m", "", line).split() for line in text.splitlines()]
    header = next(r for r in rows if r and re.fullmatch(r"GPU\d+", r[0]))
    gpus = [c for c in header if re.fullmatch(r"GPU\d+", c)]
    out = {}
    for r in rows:
        if r and r[0] in gpus and r is not header:
            for j, cell in enumerate(r[1 : 1 + len(gpus)]):
                out[(int(r[0][3:]), j)] = cell
    return out


def _raw_nvlinks(uuids):
    """Every link NVML reports per GPU, as (link, state, remote bus, remote type), for the log."""
    import pynvml

    pynvml.nvmlInit()
    out = {}
    for uuid in uuids:
        h = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        rows = []
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            row = [link]
            for call in (pynvml.nvmlDeviceGetNvLinkState, pynvml.nvmlDeviceGetNvLinkRemotePciInfo,
                         pynvml.nvmlDeviceGetNvLinkRemoteDeviceType):  # fmt: skip
                try:
                    value = call(h, link)
                    row.append(getattr(value, "bus", value))
                except pynvml.NVMLError as exc:
                    row.append(str(exc))
            rows.append(row)
        out[uuid] = rows
    pynvml.nvmlShutdown()
    return out


@pytest.mark.gpu
def test_nvml_links_agree_with_nvidia_smi():
    """On a GPU host: NVML's links, named as nvidia-smi names them, are nvidia-smi's."""
    import torch

    if torch.cuda.device_count() < 2 or shutil.which("nvidia-smi") is None:
        pytest.skip("needs 2 GPUs and nvidia-smi")
    smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout
    uuids = re.findall(r"\(UUID: (GPU-[0-9a-f-]+)\)", smi)
    table = _smi_topo(
        subprocess.run(
            ["nvidia-smi", "topo", "-m"], capture_output=True, text=True, check=True
        ).stdout
    )
    links = nvml_links(uuids)
    print(json.dumps({"uuids": uuids, "nvml": links, "nvidia-smi": sorted(table.items()),
                      "raw": _raw_nvlinks(uuids)}))  # fmt: skip
    for (i, j), cell in table.items():
        assert links[i][j] == cell.strip(), (i, j, links[i][j], cell)
    topo = detect_topology()
    assert topo.links_note == "NVML" and topo.links is not None


def test_as_dict_is_json_ready():
    topo = _detect(FakeCuda(2))
    data = json.loads(json.dumps(topo.as_dict()))
    assert data["peer_access"] == [[True, True], [True, True]] and data["p2p_problem"] is None
