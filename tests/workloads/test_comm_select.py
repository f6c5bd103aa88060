"""Backend choice from every rank's facts: auto order, manual names, reasons, the env switch."""

from __future__ import annotations

import pytest

from rankgate.workloads.comm import (
    BackendUnavailableError,
    P2PConfig,
    UnknownBackendError,
    decide,
    valid_names,
)
from rankgate.workloads.comm.p2p import disabled_by_env, peer_problem
from rankgate.workloads.comm.select import BACKEND_ENV, registry, validate_name

pytestmark = pytest.mark.unit


def gpu_rank(device: int, n_gpus: int = 2, host: str = "h0", no_access=(), **extra) -> dict:
    access = {
        str(d): [(device, d) not in no_access, (d, device) not in no_access] for d in range(n_gpus)
    }
    return {"host": host, "device": device, "access": access, "nccl": None, "p2p": None, **extra}


def cpu_rank(host: str = "h0") -> dict:
    return {"host": host, "device": None, "access": {}, "nccl": "no CUDA device", "p2p": None}


def test_valid_names_and_registry():
    assert valid_names() == ("auto", "p2p", "nccl", "gloo")
    assert set(registry()) == {"p2p", "nccl", "gloo"}
    registry().clear()  # a copy
    assert set(registry()) == {"p2p", "nccl", "gloo"}


def test_unknown_name_lists_valid_ones():
    with pytest.raises(UnknownBackendError) as info:
        validate_name("mpi")
    assert str(info.value) == "unknown comm backend 'mpi'; valid backends: auto, p2p, nccl, gloo"
    assert isinstance(info.value, ValueError)


def test_name_from_environment(monkeypatch):
    monkeypatch.setenv(BACKEND_ENV, " NCCL ")
    assert validate_name(None) == "nccl"
    monkeypatch.delenv(BACKEND_ENV)
    assert validate_name(None) == "auto"


def test_auto_prefers_p2p_when_every_pair_has_access():
    sel = decide("auto", [gpu_rank(0), gpu_rank(1)])
    assert sel.name == "p2p" and sel.passed_over == {}


def test_auto_keeps_to_a_group_without_nccl_on_gpu_ranks():
    gloo = "the process group is gloo, without NCCL"
    facts = [gpu_rank(0, group=gloo), gpu_rank(1, group=gloo)]
    sel = decide("auto", facts)
    assert sel.name == "gloo"
    assert sel.passed_over == {
        "p2p": f"needs nccl for fallback, which cannot run (rank 0: {gloo})",
        "nccl": f"rank 0: {gloo}",
    }
    # Named, nccl still gets a dedicated group of its own on these GPUs.
    assert decide("nccl", facts).name == "nccl"


def test_auto_names_the_group_before_ranks_sharing_a_gpu():
    # A gloo pool's ranks never pick a GPU, so every one sits on GPU 0: the group is why.
    gloo = "the process group is gloo, without NCCL"
    sel = decide("auto", [gpu_rank(0, group=gloo), gpu_rank(0, group=gloo)])
    assert sel.name == "gloo" and sel.passed_over["nccl"] == f"rank 0: {gloo}"
    named = decide("gloo", [gpu_rank(0, group=gloo), gpu_rank(0, group=gloo)])
    assert named.name == "gloo"
    with pytest.raises(BackendUnavailableError, match="ranks 0 and 1 share GPU0 on h0"):
        decide("nccl", [gpu_rank(0, group=gloo), gpu_rank(0, group=gloo)])


def test_auto_on_cpu_falls_to_gloo_with_reasons():
    sel = decide("auto", [cpu_rank(), cpu_rank()])
    assert sel.name == "gloo"
    assert sel.passed_over["nccl"] == "rank 0: no CUDA device"
    assert sel.passed_over["p2p"].startswith("needs nccl for fallback")


def test_auto_without_peer_access_takes_nccl_and_says_why():
    facts = [gpu_rank(0, no_access={(0, 1)}), gpu_rank(1, no_access={(0, 1)})]
    sel = decide("auto", facts)
    assert sel.name == "nccl"
    assert sel.passed_over == {
        "p2p": "asymmetric peer access between GPU0 (rank 0) and GPU1 (rank 1)"
    }


def test_one_rank_disabling_p2p_moves_everyone():
    facts = [gpu_rank(0), gpu_rank(1, p2p="disabled by RANKGATE_DISABLE_P2P=1")]
    sel = decide("auto", facts)
    assert sel.name == "nccl"
    assert sel.passed_over["p2p"] == "rank 1: disabled by RANKGATE_DISABLE_P2P=1"


def test_ranks_on_two_hosts_cannot_use_p2p():
    sel = decide("auto", [gpu_rank(0, host="a"), gpu_rank(0, host="b")])
    assert sel.name == "nccl" and "span 2 hosts" in sel.passed_over["p2p"]


def test_ranks_sharing_a_gpu_cannot_use_nccl():
    sel = decide("auto", [gpu_rank(0), gpu_rank(0)])
    assert sel.name == "gloo"
    assert sel.passed_over["nccl"] == "ranks 0 and 1 share GPU0 on h0"


def test_single_rank_gets_nccl_not_p2p():
    sel = decide("auto", [gpu_rank(0, n_gpus=1)])
    assert sel.name == "nccl" and sel.passed_over["p2p"] == "p2p needs at least 2 ranks"


def test_fewer_gpus_than_ranks_means_no_access_entry():
    # rank 1 sits on GPU 2, which rank 0's host view does not list
    facts = [gpu_rank(0, n_gpus=2), gpu_rank(2, n_gpus=3)]
    assert decide("auto", facts).name == "nccl"


def test_manual_choice_is_kept_or_refused_with_reason():
    assert decide("nccl", [gpu_rank(0), gpu_rank(1)]).name == "nccl"
    assert decide("gloo", [gpu_rank(0), gpu_rank(1)]).name == "gloo"
    with pytest.raises(
        BackendUnavailableError, match="nccl requested but cannot run: rank 0: no CUDA"
    ):
        decide("nccl", [cpu_rank(), cpu_rank()])
    with pytest.raises(BackendUnavailableError, match="p2p requested but cannot run"):
        decide("p2p", [cpu_rank(), cpu_rank()])


def test_same_facts_same_choice_on_every_rank():
    facts = [gpu_rank(0), gpu_rank(1, p2p="x")]
    assert decide("auto", list(facts)).name == decide("auto", list(facts)).name == "nccl"


@pytest.mark.parametrize(
    ("value", "disabled"),
    [("1", True), ("true", True), ("YES", True), ("on", True), ("0", False), ("", False)],
)
def test_disable_env(value, disabled):
    reason = disabled_by_env({"RANKGATE_DISABLE_P2P": value})
    assert (reason is not None) == disabled
    if disabled:
        assert reason == f"disabled by RANKGATE_DISABLE_P2P={value}"


def test_peer_problem_needs_devices():
    members = [gpu_rank(0), {"host": "h0", "device": None, "access": {}}]
    assert peer_problem(members) == "a rank has no CUDA device"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"buffer_bytes": 0}, "buffer_bytes must be a positive multiple of 16"),
        ({"buffer_bytes": 1000}, "buffer_bytes must be a positive multiple of 16"),
        ({"algorithm": "ring"}, "unknown algorithm 'ring'; valid: auto, push, oneshot, twoshot"),
        ({"oneshot_max_bytes": -1}, "oneshot_max_bytes must be >= 0"),
    ],
)
def test_p2p_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        P2PConfig(**kwargs)
