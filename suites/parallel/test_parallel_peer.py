"""rankgate's ring against PyTorch's own context parallel, where both apply.

``torch.distributed.tensor.experimental.context_parallel`` shards buffers with the
same head-tail (dual-chunk) layout and swaps ``scaled_dot_product_attention`` for its
ring while the context is open. It needs a CUDA attention kernel (on CPUs there is no
sharding rule for the CPU flash kernel), so the comparison runs on GPUs: the same
shards (checked), the same bf16 inputs, outputs and input gradients against each
other and against a one-GPU fp32 baseline.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from parallelcase import GPU_WORLDS, qkv

from rankgate.parity import assert_parity
from rankgate.workloads.cp import DualChunkSharding
from rankgate.workloads.ring_attention import ring_attention
from rankgate.workloads.ring_attention.reference import attention

NAMES = ("out", "dq", "dk", "dv")


def pytorch_context_parallel(q, k, v, dout, world_size, device):
    """PyTorch's CP on the global tensors: (this rank's shards of q, k, v, dout), results."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel

    mesh = init_device_mesh(device.type, (world_size,))
    buffers = [t.clone() for t in (q, k, v, dout)]
    with context_parallel(mesh, buffers=buffers, buffer_seq_dims=[2, 2, 2, 2],
                          no_restore_buffers=set(buffers)):  # fmt: skip
        leaves = [t.detach().clone().requires_grad_() for t in buffers[:3]]
        out = F.scaled_dot_product_attention(*leaves, is_causal=True)
        grads = torch.autograd.grad(out, leaves, buffers[3])
    return buffers, (out.detach(), *grads)


@pytest.mark.parametrize("world", GPU_WORLDS)
def test_ring_matches_pytorch_context_parallel_gpu(world, rank, world_size, device):
    q, k, v, dout = qkv(1, 8, 8, 4096, 64, seed=70, dtype=torch.bfloat16, device=device)
    sharding = DualChunkSharding.bshd(4096, world_size)

    shards, theirs = pytorch_context_parallel(q, k, v, dout, world_size, device)
    for name, mine, full in zip(("q", "k", "v", "dout"), shards, (q, k, v, dout)):
        assert torch.equal(mine, sharding.shard(full, rank, dim=2)), f"{name}: layouts differ"

    leaves = [sharding.shard(t, rank, dim=2).requires_grad_() for t in (q, k, v)]
    out = ring_attention(*leaves, causal=True)
    ours = (out.detach(), *torch.autograd.grad(out, leaves, sharding.shard(dout, rank, dim=2)))
    assert_parity(dict(zip(NAMES, ours)), dict(zip(NAMES, theirs)),
                  what=f"rankgate ring vs PyTorch context_parallel, world {world_size}")  # fmt: skip

    full = [t.float().requires_grad_() for t in (q, k, v)]
    ref = attention(*full, causal=True)
    ref_all = (ref, *torch.autograd.grad(ref, full, dout.float()))
    expected = {n: sharding.shard(t, rank, dim=2) for n, t in zip(NAMES, ref_all)}
    assert_parity(dict(zip(NAMES, theirs)), expected,
                  what=f"PyTorch context_parallel vs one GPU fp32, world {world_size}")  # fmt: skip
