"""The p2p backend's routing: which kernel serves which all-reduce, eager and in a graph."""

from __future__ import annotations

import pytest
import torch

from rankgate.workloads.comm import P2PConfig
from rankgate.workloads.comm.p2p import route_all_reduce

pytestmark = pytest.mark.unit

KiB, MiB = 1 << 10, 1 << 20
CFG = P2PConfig()  # the 2 x H200 defaults


def route(nbytes, dtype=torch.float32, cfg=CFG, capturing=False, **kw):
    kw.setdefault("op", "sum")
    kw.setdefault("problem", None)
    return route_all_reduce(cfg, dtype=dtype, nbytes=nbytes, capturing=capturing, **kw)


@pytest.mark.parametrize(
    ("nbytes", "eager", "graph"),
    [
        (4, "push", "push"),
        (8 * KiB, "push", "push"),
        (8 * KiB + 4, "push", "push"),
        (128 * KiB, "push", "push"),
        (256 * KiB, "push", "push"),
        (256 * KiB + 4, "oneshot", "oneshot"),
        (512 * KiB, "oneshot", "oneshot"),
        (1 * MiB, "oneshot", "oneshot"),
        (1 * MiB + 4, "oneshot", "twoshot"),
        (2 * MiB, "oneshot", "twoshot"),
        (4 * MiB, "twoshot", "twoshot"),
        (8 * MiB, "twoshot", "twoshot"),
        (16 * MiB, "nccl", "twoshot"),
        (32 * MiB, "nccl", "nccl"),
    ],
)
def test_measured_crossovers_per_mode(nbytes, eager, graph):
    assert route(nbytes)[0] == eager
    assert route(nbytes, capturing=True)[0] == graph


def test_graph_thresholds_default_to_eager_ones():
    cfg = P2PConfig(push_max_bytes=64 * KiB, graph_push_max_bytes=None,
                    oneshot_max_bytes=64 * KiB, graph_oneshot_max_bytes=None,
                    twoshot_max_bytes=MiB, graph_twoshot_max_bytes=None)  # fmt: skip
    assert not cfg.graph_differs
    assert cfg.thresholds(True) == cfg.thresholds(False) == (64 * KiB, 64 * KiB, MiB)
    assert P2PConfig().graph_differs


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"op": "max"}, "reduce op max"),
        ({"dtype": torch.int32}, "dtype torch.int32"),
        ({"dtype": torch.float16}, "dtype torch.float16"),
        ({"nbytes": 6, "dtype": torch.bfloat16}, "size not a multiple of 4 bytes"),
        ({"problem": "non-contiguous tensor"}, "non-contiguous tensor"),
        ({"nbytes": 64 * MiB}, "payload over 8388608 bytes"),
        ({"has_twoshot": False, "nbytes": 4 * MiB}, "no two-shot kernel for torch.float32"),
    ],
)
def test_fallbacks_name_their_reason(kwargs, reason):
    args = {"nbytes": 1024, **kwargs}
    assert route(**args) == ("nccl", reason)


def test_without_the_push_kernel_small_payloads_take_one_shot():
    assert route(1024, has_push=False) == ("oneshot", "")
    assert route(1024, cfg=P2PConfig(push_max_bytes=0, graph_push_max_bytes=0)) == ("oneshot", "")
    assert route(1024, cfg=P2PConfig(algorithm="push"), has_push=False) == (
        "nccl",
        "no push kernel here",
    )


def test_push_slot_covers_both_modes():
    cfg = P2PConfig(push_max_bytes=16 * KiB, graph_push_max_bytes=100)
    assert cfg.push_slot_bytes == 16 * KiB
    assert route(8 * KiB, cfg=cfg) == ("push", "")
    assert route(8 * KiB, cfg=cfg, capturing=True) == ("oneshot", "")
    assert P2PConfig(push_max_bytes=0, graph_push_max_bytes=1000).push_slot_bytes == 1008
    forced = P2PConfig(algorithm="push")
    assert route(256 * KiB, cfg=forced) == ("push", "")
    assert route(256 * KiB + 16, cfg=forced) == (
        "nccl",
        "payload over the push slot of 262144 bytes",
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"push_max_bytes": 100}, "push_max_bytes must be a multiple of 16, got 100"),
        ({"push_max_bytes": -16}, "push_max_bytes must be >= 0"),
        (
            {"graph_push_max_bytes": 1 << 20},
            "push_max_bytes and graph_push_max_bytes must be at most 262144, got 1048576",
        ),
        (
            {"algorithm": "three-shot"},
            "unknown algorithm 'three-shot'; valid: auto, push, oneshot, twoshot",
        ),
    ],
)
def test_bad_push_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError) as info:
        P2PConfig(**kwargs)
    assert str(info.value) == message


def test_forced_algorithm_ignores_thresholds():
    cfg = P2PConfig(algorithm="twoshot")
    assert route(4, cfg=cfg) == ("twoshot", "")
    assert route(30 * MiB, cfg=P2PConfig(algorithm="oneshot")) == ("oneshot", "")
