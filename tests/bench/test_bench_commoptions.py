"""``rankgate bench comm``'s options record: defaults per machine, refusals, and what reaches meta."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from rankgate.bench.commoptions import CommOptions, add_arguments
from rankgate.workloads.comm import P2PConfig

pytestmark = pytest.mark.unit


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_cpu_defaults():
    opts = CommOptions.from_args(parse(), gpus=0)
    assert (opts.world, opts.on_gpu, opts.backends, opts.collectives) == (
        2, False, ("gloo",), ("all_reduce",)
    )  # fmt: skip
    assert opts.sizes[0] == 8 and opts.sizes[-1] == 512 << 10  # 8 B by 4 to 1 MiB
    assert opts.graph_max == 0  # no CUDA graphs on the CPU


def test_gpu_defaults_take_every_visible_gpu():
    opts = CommOptions.from_args(parse(), gpus=4)
    assert (opts.world, opts.on_gpu, opts.graph_max) == (4, True, 64 << 20)
    assert opts.backends == ("nccl", "p2p-push", "p2p-oneshot", "p2p-twoshot", "auto")
    assert opts.sizes[-1] == 2 << 30
    assert CommOptions.from_args(parse("--cpu"), gpus=4).on_gpu is False
    assert CommOptions.from_args(parse("--world", "8"), gpus=4).on_gpu is False  # too few GPUs


def test_buffer_defaults_to_what_auto_ships_with():
    opts = CommOptions.from_args(parse(), gpus=2)
    assert opts.buffer_bytes is None
    assert opts.p2p_config() == P2PConfig()
    sized = CommOptions.from_args(parse("--buffer-bytes", "64M"), gpus=2)
    assert sized.p2p_config(algorithm="push") == P2PConfig(buffer_bytes=64 << 20, algorithm="push")


@pytest.mark.parametrize(
    ("argv", "names", "message"),
    [
        (("--cpu", "--backends", "gloo,nccl"), {}, "--backends nccl needs one GPU per rank and "
         "this run is on the CPU (2 ranks); use --backends gloo, or run where 2 GPUs are visible "
         "without --cpu"),
        # the command line refuses unknown names itself (tests/bench/test_bench_options.py);
        # the record checks again for options built in code
        ((), {"backends": "nccl,mpi"}, "unknown backend 'mpi'; valid: auto, p2p, nccl, gloo, "
         "p2p-push, p2p-oneshot, p2p-twoshot"),
        ((), {"collectives": "alltoall"}, "unknown collective 'alltoall'; valid: all_reduce, "
         "broadcast, all_gather, reduce_scatter, gather, send_recv"),
    ],
    ids=["nccl-on-cpu", "unknown-backend", "unknown-collective"],
)  # fmt: skip
def test_bad_values_are_refused_with_the_reason(argv, names, message):
    args = parse(*argv)
    vars(args).update(names)
    with pytest.raises(ValueError) as info:
        CommOptions.from_args(args, gpus=0)
    assert str(info.value) == message


def test_the_record_is_frozen_and_its_meta_is_json():
    opts = CommOptions.from_args(parse("--buffer-bytes", "16M"), gpus=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.rounds = 3
    meta = json.loads(json.dumps(opts.as_meta()))
    assert "sizes" not in meta and meta["buffer_bytes"] == 16 << 20
    assert meta["backends"][0] == "nccl" and meta["iters"] == 20
