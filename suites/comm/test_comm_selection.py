"""Backend selection across ranks: auto, manual names, the p2p switch, reasons logged."""

from __future__ import annotations

import logging

import pytest
import torch

from rankgate.workloads.comm import (
    BackendUnavailableError,
    GlooBackend,
    NcclBackend,
    P2PBackend,
    UnknownBackendError,
    create_backend,
)


class Records(logging.Handler):
    """The rankgate.comm log records of one test body (caplog does not reach ranks)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def __enter__(self) -> Records:
        logger = logging.getLogger("rankgate.comm")
        self._old = logger.level
        logger.setLevel(logging.INFO)
        logger.addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        logger = logging.getLogger("rankgate.comm")
        logger.removeHandler(self)
        logger.setLevel(self._old)


@pytest.mark.world(2, backend="gloo")
def test_auto_on_cpu_ranks_is_gloo_and_logs_why(device):
    with Records() as logs:
        backend = create_backend("auto")
    try:
        assert isinstance(backend, GlooBackend) and backend.device.type == "cpu"
        passed = backend.selection.passed_over
        assert set(passed) == {"p2p", "nccl"}
        assert any(line.startswith("comm backend auto: not nccl (rank") for line in logs.lines)
        if torch.cuda.device_count() >= 2:  # GPUs for nccl, but the test's group is gloo
            assert passed["nccl"] == "rank 0: the process group is gloo, without NCCL"
        assert "comm backend: gloo (requested auto)" in logs.lines
        assert backend.all_reduce(torch.ones(3)).tolist() == [2.0, 2.0, 2.0]
    finally:
        backend.destroy()


@pytest.mark.world(2, backend="gloo")
def test_manual_gloo(device):
    with create_backend("gloo") as backend:
        assert backend.selection.requested == "gloo" and backend.name == "gloo"


@pytest.mark.world(2, backend="gloo")
def test_backend_from_environment():
    import os

    os.environ["RANKGATE_COMM_BACKEND"] = "gloo"  # the worker restores the environment
    with create_backend() as backend:
        assert backend.name == "gloo" and backend.selection.requested == "gloo"


@pytest.mark.world(2, backend="gloo")
def test_unknown_name_is_refused_on_every_rank_before_any_exchange():
    with pytest.raises(UnknownBackendError, match="valid backends: auto, p2p, nccl, gloo"):
        create_backend("nvshmem")


@pytest.mark.world(2, backend="gloo")
def test_manual_nccl_without_gpus_is_refused_on_every_rank():
    gpus = torch.cuda.device_count()
    if gpus >= 2:
        pytest.skip("this machine has GPUs for nccl")
    # The reason names this machine's shortage: no GPU at all, or one GPU for two ranks.
    why = "rank 0: no CUDA device" if gpus == 0 else "ranks 0 and 1 share GPU0 on "
    with pytest.raises(BackendUnavailableError, match=f"nccl requested but cannot run: {why}"):
        create_backend("nccl")


@pytest.mark.world(2, backend="gloo")
def test_manual_p2p_without_gpus_is_refused_on_every_rank():
    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has GPUs")
    with pytest.raises(BackendUnavailableError, match="p2p requested but cannot run"):
        create_backend("p2p")


@pytest.mark.world(4, backend="gloo")
def test_selection_agrees_at_world_4(rank):
    backends = [create_backend("auto") for _ in range(3)]  # repeated rounds use fresh keys
    try:
        assert {b.name for b in backends} == {"gloo"}
        assert backends[0].world_size == 4 and backends[0].rank == rank
    finally:
        for b in backends:
            b.destroy()


# --- on GPUs ---------------------------------------------------------------------


@pytest.mark.world(2, backend="nccl")
def test_gpu_auto_prefers_p2p(device):
    with create_backend("auto", device=device) as backend:
        assert isinstance(backend, P2PBackend), backend.selection
        assert backend.selection.passed_over == {}


@pytest.mark.world(2, backend="nccl")
def test_gpu_p2p_disabled_on_one_rank_moves_every_rank_to_nccl(rank, device):
    import os

    if rank == 1:
        os.environ["RANKGATE_DISABLE_P2P"] = "1"
    with Records() as logs, create_backend("auto", device=device) as backend:
        assert type(backend) is NcclBackend
        reason = "rank 1: disabled by RANKGATE_DISABLE_P2P=1"
        assert backend.selection.passed_over == {"p2p": reason}
        assert f"comm backend auto: not p2p ({reason})" in logs.lines


@pytest.mark.world(2, backend="nccl")
def test_gpu_missing_peer_access_falls_back_to_nccl_with_reason(device):
    real = torch.cuda.can_device_access_peer
    torch.cuda.can_device_access_peer = lambda a, b: False
    try:
        with Records() as logs, create_backend("auto", device=device) as backend:
            assert type(backend) is NcclBackend
            assert backend.selection.passed_over["p2p"].startswith("no peer access between GPU")
            assert any("not p2p (no peer access" in line for line in logs.lines)
        with pytest.raises(BackendUnavailableError, match="p2p requested but cannot run: no peer"):
            create_backend("p2p", device=device)
    finally:
        torch.cuda.can_device_access_peer = real


@pytest.mark.world(2, backend="nccl")
def test_gpu_direct_p2p_construction_refused_together(rank, device):
    import os

    if rank == 0:
        os.environ["RANKGATE_DISABLE_P2P"] = "yes"
    with pytest.raises(
        BackendUnavailableError, match="p2p: rank 0: disabled by RANKGATE_DISABLE_P2P"
    ):
        P2PBackend(device=device)
