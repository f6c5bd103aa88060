"""Peer-access detection on described machines: 0, 1, n GPUs, shortfalls, asymmetry, topo text."""

from __future__ import annotations

import pytest

from rankgate.workloads.comm.detect import detect_topology, parse_topo_matrix

pytestmark = pytest.mark.unit

TOPO_2 = """\
\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m
GPU0\t X \tNV18\t0-31\t0\t\tN/A
GPU1\tNV18\t X \t0-31\t0\t\tN/A

Legend:

  X    = Self
  NV#  = Connection traversing a bonded set of # NVLinks
"""

TOPO_4_NIC = """\
        GPU0    GPU1    GPU2    GPU3    NIC0    CPU Affinity    NUMA Affinity
GPU0     X      NV4     PIX     SYS     PHB     0-15    0
GPU1    NV4      X      SYS     PIX     PHB     0-15    0
GPU2    PIX     SYS      X      NV4     SYS     16-31   1
GPU3    SYS     PIX     NV4      X      SYS     16-31   1
NIC0    PHB     PHB     SYS     SYS      X

Legend:
"""


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


def _detect(cuda, requested=None, topo=None, env=""):
    return detect_topology(requested, probe=cuda, topo_text=lambda: topo, visible_env=env)


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


def test_links_from_nvidia_smi():
    topo = _detect(FakeCuda(2), topo=TOPO_2)
    assert topo.links == (("X", "NV18"), ("NV18", "X"))
    assert topo.links_note == "nvidia-smi topo -m"
    assert "Y/NV18" in topo.format_matrix()


def test_links_follow_cuda_visible_devices():
    topo = _detect(FakeCuda(2), topo=TOPO_4_NIC, env="2,1")
    # visible 0 is physical 2, visible 1 is physical 1
    assert topo.links == (("X", "SYS"), ("SYS", "X"))


def test_links_unmapped_with_uuids():
    topo = _detect(FakeCuda(2), topo=TOPO_2, env="GPU-aaaa,GPU-bbbb")
    assert topo.links is None and "not a list of indices" in topo.links_note


def test_links_missing_tool_or_garbage():
    assert _detect(FakeCuda(2), topo=None).links_note == "nvidia-smi topo -m not available"
    topo = _detect(FakeCuda(2), topo="NVIDIA-SMI has failed")
    assert topo.links is None and "unreadable" in topo.links_note


def test_parse_skips_nic_rows_and_columns():
    table = parse_topo_matrix(TOPO_4_NIC)
    assert table[(0, 1)] == "NV4" and table[(2, 3)] == "NV4" and table[(0, 3)] == "SYS"
    assert len(table) == 16


def test_as_dict_is_json_ready():
    import json

    topo = _detect(FakeCuda(2), topo=TOPO_2)
    data = json.loads(json.dumps(topo.as_dict()))
    assert data["peer_access"] == [[True, True], [True, True]] and data["p2p_problem"] is None
