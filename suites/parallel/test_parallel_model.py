"""The tiny transformer at CP=1 against CP=N: logits, token-weighted loss, every gradient.

The CP=N run shards tokens, labels and positions with load-balanced dual chunks and
swaps the model's attention for ring attention. Its logits are gathered and put back
in order; its loss is the sum over every rank's labelled tokens divided by their
global count (not a mean of per-rank means, which weights ranks, not tokens); each
rank back-propagates its own sum over that global count and the gradients are summed
over ranks. In fp32 on the CPU all of that equals one process's to fp32 rounding
(rankgate.parity's fp32 tolerance, relative L2 <= 1e-5). BSHD (a batch of equal
sequences) and THD (packed sequences of 5, 13 and 9 tokens, padded per sequence).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from parallelcase import CPU_MULTI, GPU_WORLDS

from rankgate.parity import DEFAULT_TOLERANCES, assert_parity
from rankgate.workloads.cp import DualChunkSharding, next_token_labels, pack_sequences
from rankgate.workloads.model import build_model, token_loss_sum
from rankgate.workloads.ring_attention import RingAttention
from rankgate.workloads.ring_attention.reference import varlen_attention


def _inputs(layout: str, cp: int, device):
    """(tokens, labels, positions, sharding, CP=1 attention) for ``layout``, same on every rank."""
    g = torch.Generator().manual_seed(7)
    if layout == "bshd":
        tokens = torch.randint(0, 256, (2, 32), generator=g)
        labels = next_token_labels(tokens)
        positions = torch.arange(32).expand(2, 32)
        return tokens, labels, positions, DualChunkSharding.bshd(32, cp), None
    sequences = [torch.randint(0, 256, (n,), generator=g) for n in (5, 13, 9)]
    packed = pack_sequences(sequences, cp=cp)
    cu = tuple(packed.cu_seqlens.tolist())

    def per_sequence(q, k, v):
        return varlen_attention(q, k, v, cu, causal=True)

    sharding = DualChunkSharding.thd(packed.cu_seqlens, cp)
    return packed.tokens[None], packed.labels[None], packed.positions[None], sharding, per_sequence


def _check_cp_model(rank, world_size, device, layout, dtype):
    tokens, labels, positions, sharding, one_process_attention = _inputs(layout, world_size, device)
    tokens, labels, positions = (t.to(device) for t in (tokens, labels, positions))

    baseline = build_model(seed=0).to(device=device, dtype=dtype)
    kwargs = {"attention": one_process_attention} if one_process_attention else {}
    logits = baseline(tokens, positions, **kwargs)
    loss_sum, count = token_loss_sum(logits, labels)
    (loss_sum / count).backward()
    expected = {"logits": logits.detach(), "loss": (loss_sum / count).detach()}
    expected |= {f"grad.{n}": p.grad for n, p in baseline.named_parameters()}

    model = build_model(seed=0).to(device=device, dtype=dtype)
    mine = [sharding.shard(t, rank, dim=1) for t in (tokens, labels, positions)]
    attention = RingAttention(local_cu_seqlens=sharding.local_cu_seqlens)
    local_logits = model(mine[0], mine[2], attention=attention)
    local_sum, local_count = token_loss_sum(local_logits, mine[1])
    total = local_count.clone()
    dist.all_reduce(total)  # labelled tokens on every rank: weights the loss by tokens
    (local_sum / total).backward()
    loss = local_sum.detach().clone()
    dist.all_reduce(loss)
    gathered = [torch.empty_like(local_logits) for _ in range(world_size)]
    dist.all_gather(gathered, local_logits.detach().contiguous())
    actual = {"logits": sharding.unshard(gathered, dim=1), "loss": loss / total}
    for name, p in model.named_parameters():
        dist.all_reduce(p.grad)
        actual[f"grad.{name}"] = p.grad
    # the loss is an fp32 sum of bf16 logits' cross-entropies: judged as bf16 in a bf16 model
    # (5.5e-5 relative on 2xH200, THD), exactly as fp32 in an fp32 one
    tolerance = {"loss": DEFAULT_TOLERANCES[dtype]}
    assert_parity(actual, expected, what=f"model {layout} CP=1 vs CP={world_size} ({dtype})",
                  tolerance=tolerance)  # fmt: skip


@pytest.mark.parametrize("layout", ["bshd", "thd"])
@pytest.mark.parametrize("world", CPU_MULTI)
def test_cp_model_matches_one_process_fp32(world, layout, rank, world_size, device):
    _check_cp_model(rank, world_size, device, layout, torch.float32)


@pytest.mark.parametrize("layout", ["bshd", "thd"])
@pytest.mark.parametrize("world", GPU_WORLDS)
def test_cp_model_matches_one_gpu_bf16(world, layout, rank, world_size, device):
    _check_cp_model(rank, world_size, device, layout, torch.bfloat16)
