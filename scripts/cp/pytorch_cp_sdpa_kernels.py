"""PyTorch's context_parallel on each SDPA path: which kernel ran, and how far off it is.

Standalone (torch only), for a bug report anyone can rerun:

    torchrun --standalone --nproc-per-node=2 scripts/cp/pytorch_cp_sdpa_kernels.py

The defaults are the shapes, seed and inputs of
``suites/parallel/test_parallel_peer.py::test_ring_matches_pytorch_context_parallel_gpu``
(batch 1, 8 heads, 4096 tokens, head dim 64, bf16, seed 70), whose backends are the
first two paths. On every rank, for each SDPA path (the default choice, then flash,
efficient and cuDNN forced), it runs causal attention under
``torch.distributed.tensor.experimental.context_parallel`` on bf16 inputs, records the
attention operators that ran forward and backward (torch.profiler), and compares the
rank's shards of out, dq, dk and dv with an fp32 attention computed on one device from
the same global inputs. The baseline is sharded by context_parallel itself (it is
passed as extra buffers), so both sides use the same layout. One JSON line per rank and
path, once as the suite's test does it (the context closed with the GPU's work still
queued) and once synchronized inside the context: {"rank", "path",
"synchronized_in_context", "forward", "backward", "rel_l2": {...}, "max_abs": {...}}.

``--ring-first`` runs rankgate's ring attention (forward and backward, on this rank's
shards) before PyTorch's, as the suite's test does: whether what ran before in the
process changes PyTorch's result. Only that option imports rankgate.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.experimental import context_parallel
from torch.nn.attention import SDPBackend, sdpa_kernel

PATHS = {
    "default": None,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}
NAMES = ("out", "dq", "dk", "dv")


def global_inputs(args, device):
    """q, k, v, dout (batch, heads, seq, dim) in bf16, the same on every rank: as
    suites/parallel/test_parallel_peer.py makes them (tensor i from seed + i)."""
    shape = (args.batch, args.heads, args.seq, args.dim)
    return [
        torch.randn(shape, generator=torch.Generator().manual_seed(args.seed + i)).to(
            device, torch.bfloat16
        )
        for i in range(4)
    ]


def fp32_baseline(q, k, v, dout):
    """Causal softmax attention in fp32 with plain matmuls, and its gradients."""
    leaves = [t.float().requires_grad_() for t in (q, k, v)]
    scores = leaves[0] @ leaves[1].transpose(-2, -1) / math.sqrt(q.shape[-1])
    seq = q.shape[-2]
    mask = torch.ones(seq, seq, dtype=torch.bool, device=q.device).tril()
    out = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ leaves[2]
    grads = torch.autograd.grad(out, leaves, dout.float())
    return [out.detach(), *grads]


def attention_ops(prof) -> tuple[list[str], list[str]]:
    """The attention operators the profiler saw: (forward, backward)."""
    names = sorted({e.key for e in prof.key_averages() if "attention" in e.key.lower()})
    backward = [n for n in names if "backward" in n]
    forward = [n for n in names if n not in backward and "scaled_dot_product" in n]
    return forward, backward


def run_path(path, forced, q, k, v, dout, baseline, mesh, synchronize):
    buffers = [t.clone() for t in (q, k, v, dout, *baseline)]
    chosen = sdpa_kernel([forced]) if forced is not None else contextlib.nullcontext()
    activities = [torch.profiler.ProfilerActivity.CPU]
    with (
        chosen,
        context_parallel(
            mesh,
            buffers=buffers,
            buffer_seq_dims=[2] * len(buffers),
            no_restore_buffers=set(buffers),
        ),
        torch.profiler.profile(activities=activities) as prof,
    ):
        leaves = [t.detach().clone().requires_grad_() for t in buffers[:3]]
        out = F.scaled_dot_product_attention(*leaves, is_causal=True)
        grads = torch.autograd.grad(out, leaves, buffers[3])
        if synchronize:  # the GPU's work done before the context closes (the test does not)
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    forward, backward = attention_ops(prof)
    rel_l2, max_abs = {}, {}
    for name, got, want in zip(NAMES, (out, *grads), buffers[4:]):
        diff = got.detach().float() - want.float()
        rel_l2[name] = round((diff.norm() / want.float().norm()).item(), 6)
        max_abs[name] = round(diff.abs().max().item(), 6)
    return {
        "path": path,
        "synchronized_in_context": synchronize,
        "forward": forward,
        "backward": backward,
        "rel_l2": rel_l2,
        "max_abs": max_abs,
    }


def run_rankgate_ring_first(q, k, v, dout, rank, world) -> None:
    """rankgate's ring on this rank's dual-chunk shards, forward and backward, as the
    suite's test runs it before PyTorch's context parallel."""
    from rankgate.workloads.cp import DualChunkSharding
    from rankgate.workloads.ring_attention import ring_attention

    sharding = DualChunkSharding.bshd(q.shape[2], world)
    leaves = [sharding.shard(t, rank, dim=2).requires_grad_() for t in (q, k, v)]
    out = ring_attention(*leaves, causal=True)
    torch.autograd.grad(out, leaves, sharding.shard(dout, rank, dim=2))
    torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seed", type=int, default=70)
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--ring-first", action="store_true",
                        help="run rankgate's ring attention first, as the suite's test does")
    args = parser.parse_args()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", device_id=device)
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cuda", (world,))
    q, k, v, dout = global_inputs(args, device)
    baseline = fp32_baseline(q, k, v, dout)
    if args.ring_first:
        run_rankgate_ring_first(q, k, v, dout, rank, world)
    runs = [(path, sync) for path in args.paths.split(",") for sync in (False, True)]
    for path, sync in runs:
        try:
            row = run_path(path, PATHS[path], q, k, v, dout, baseline, mesh, sync)
        except Exception as exc:  # a path this GPU or build cannot run
            row = {"path": path, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        row = {
            "rank": rank,
            "world": world,
            "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name(device),
            "ring_first": args.ring_first,
            **row,
        }
        print(json.dumps(row), flush=True)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
