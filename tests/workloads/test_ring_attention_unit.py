"""Ring attention in one process: plans against global masks, kernels against autograd,
the log-sum-exp merge, a ring of one, and the errors. Multi-rank parity: suites/parallel."""

from __future__ import annotations

import pytest
import torch

from rankgate.parity import assert_parity
from rankgate.workloads.cp import DualChunkSharding
from rankgate.workloads.ring_attention import (
    DilatedConfig,
    DualChunkPlan,
    MathKernel,
    SegmentPlan,
    dilated_attention,
    ring_attention,
)
from rankgate.workloads.ring_attention.reference import (
    attention,
    dilated_attention_reference,
    dilated_mask,
    varlen_attention,
)
from rankgate.workloads.ring_attention.ring import _merge

pytestmark = pytest.mark.unit


def _qkv(b=2, h=4, hk=2, s=16, d=8, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, n, s, d, generator=g, dtype=dtype) for n in (h, hk, hk)]


def _coverage(sharding: DualChunkSharding, causal: bool) -> torch.Tensor:
    """How often each global (query, key) pair is computed over all ranks and steps."""
    cp = sharding.cp
    plan = DualChunkPlan(sharding.local_cu_seqlens, causal=causal)
    count = torch.zeros(sharding.total, sharding.total, dtype=torch.int64)
    for rank in range(cp):
        q_global = sharding.indices(rank)
        for step in range(cp):
            source = (rank - step) % cp
            k_global = sharding.indices(source)
            for block in plan.blocks(rank, source):
                qi = q_global[block.q[0] : block.q[1]]
                ki = k_global[block.k[0] : block.k[1]]
                keep = torch.ones(len(qi), len(ki), dtype=torch.bool)
                if block.causal:
                    keep = keep.tril(len(ki) - len(qi))
                count[qi[:, None], ki[None, :]] += keep.long()
    return count


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("cp", [1, 2, 3, 4])
@pytest.mark.parametrize("cu", [(0, 48), (0, 24, 72, 96)], ids=["bshd", "thd"])
def test_dual_chunk_plan_covers_the_mask_exactly_once(cu, cp, causal):
    sharding = DualChunkSharding.thd(list(cu), cp)
    seq_of = torch.bucketize(torch.arange(sharding.total), torch.tensor(cu[1:]), right=True)
    want = seq_of[:, None] == seq_of[None, :]
    if causal:
        want &= torch.ones_like(want).tril()
    assert torch.equal(_coverage(sharding, causal), want.long())


@pytest.mark.parametrize("cp", [1, 2, 4])
def test_dual_chunk_plan_is_balanced_under_causal_masking(cp):
    plan = DualChunkPlan((0, 16), causal=True)
    work = []
    for rank in range(cp):
        cells = 0
        for step in range(cp):
            for b in plan.blocks(rank, (rank - step) % cp):
                n_q, n_k = b.q[1] - b.q[0], b.k[1] - b.k[0]
                cells += n_q * (n_q + 1) // 2 if b.causal else n_q * n_k
        work.append(cells)
    assert max(work) - min(work) == 0


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("local", "segment", "cp"), [(8, 4, 3), (8, 16, 4), (6, 4, 4), (5, 5, 2)])
def test_segment_plan_covers_segments_exactly_once(local, segment, cp, causal):
    total = local * cp
    count = torch.zeros(total, total, dtype=torch.int64)
    plan = SegmentPlan(local, segment, causal)
    for rank in range(cp):
        for step in range(cp):
            source = (rank - step) % cp
            for b in plan.blocks(rank, source):
                qi = torch.arange(*b.q) + rank * local
                ki = torch.arange(*b.k) + source * local
                keep = torch.ones(len(qi), len(ki), dtype=torch.bool)
                if b.causal:
                    keep = keep.tril(len(ki) - len(qi))
                count[qi[:, None], ki[None, :]] += keep.long()
    pos = torch.arange(total)
    want = (pos[:, None] // segment) == (pos[None, :] // segment)
    if causal:
        want &= pos[None, :] <= pos[:, None]
    assert torch.equal(count, want.long())


@pytest.mark.parametrize("causal", [True, False])
def test_math_kernel_matches_autograd_with_grouped_query_heads(causal):
    q, k, v = (t.requires_grad_() for t in _qkv())
    kernel = MathKernel()
    out, lse = kernel.forward(q, k, v, causal, 8**-0.5)
    ref = attention(q, k, v, causal=causal)
    dout = torch.randn_like(ref)
    ref.backward(dout)
    dq, dk, dv = kernel.backward(dout, q, k, v, out, lse, causal, 8**-0.5)
    assert_parity({"out": out, "dq": dq, "dk": dk, "dv": dv},
                  {"out": ref, "dq": q.grad, "dk": k.grad, "dv": v.grad})  # fmt: skip


def test_lse_merge_of_two_key_blocks_is_attention_over_both():
    q, k, v = _qkv(hk=4)
    kernel = MathKernel()
    out, lse = kernel.forward(q, k[:, :, :6], v[:, :, :6], False, 8**-0.5)
    o2, l2 = kernel.forward(q, k[:, :, 6:], v[:, :, 6:], False, 8**-0.5)
    _merge(out, lse, o2, l2, fresh=False)
    assert_parity(out, attention(q, k, v, causal=False))
    # a row nothing has touched yet (lse = -inf) takes the block as it is
    blank_out, blank_lse = torch.zeros_like(out), torch.full_like(lse, float("-inf"))
    _merge(blank_out, blank_lse, o2, l2, fresh=False)
    assert torch.equal(blank_out, o2) and torch.equal(blank_lse, l2)


@pytest.mark.parametrize("head_chunks", [1, 2])
@pytest.mark.parametrize("causal", [True, False])
def test_ring_of_one_equals_attention_forward_and_backward(causal, head_chunks):
    q, k, v = (t.requires_grad_() for t in _qkv(dtype=torch.float32))
    out = ring_attention(q, k, v, causal=causal, head_chunks=head_chunks)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    ref = attention(q, k, v, causal=causal)
    ref_grads = torch.autograd.grad(ref, (q, k, v), dout)
    names = ("out", "dq", "dk", "dv")
    assert_parity(dict(zip(names, (out, *grads))), dict(zip(names, (ref, *ref_grads))))


def test_ring_of_one_thd_keeps_sequences_apart():
    q, k, v = (t.requires_grad_() for t in _qkv(b=1, s=24, dtype=torch.float32))
    cu = (0, 8, 20, 24)
    out = ring_attention(q, k, v, local_cu_seqlens=cu)
    assert_parity(out, varlen_attention(q, k, v, cu, causal=True))


@pytest.mark.parametrize("causal", [True, False])
def test_dilated_ring_of_one_equals_the_masked_definition(causal):
    q, k, v = (t.requires_grad_() for t in _qkv(h=4, hk=2, s=16, dtype=torch.float64))
    config = DilatedConfig(segment_lengths=(4, 8), dilation_rates=(1, 2), causal=causal)
    out = dilated_attention(q, k, v, config)
    ref = dilated_attention_reference(q, k, v, (4, 8), (1, 2), causal=causal)
    dout = torch.randn_like(ref)
    names = ("out", "dq", "dk", "dv")
    got = (out, *torch.autograd.grad(out, (q, k, v), dout))
    want = (ref, *torch.autograd.grad(ref, (q, k, v), dout))
    assert_parity(dict(zip(names, got)), dict(zip(names, want)))
    # group 1 (rate 2, offset 1) leaves its even positions at zero
    assert torch.all(out[:, 2:, 0::2] == 0)


def test_dilated_mask_groups():
    mask = dilated_mask(8, 2, (4, 8), (1, 2), causal=False)
    assert mask[0, 0].tolist() == [True] * 4 + [False] * 4  # head 0: segment of 4, rate 1
    assert mask[1, 1].tolist() == [False, True] * 4  # head 1: rate 2, offset 1
    assert not mask[1, 0].any()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda q, k, v: ring_attention(q[0], k, v), "shaped \\(batch, heads, seq, head_dim\\)"),
        (lambda q, k, v: ring_attention(q, k, v[:, :1]), "do not match"),
        (lambda q, k, v: ring_attention(q[:, :3], k, v), "heads=3 is not a multiple of kv_heads=2"),
        (lambda q, k, v: ring_attention(q, k, v, head_chunks=3), "head_chunks=3 must be >= 1 and divide kv_heads=2"),
        (lambda q, k, v: ring_attention(q, k, v, local_cu_seqlens=(0, 8)), "ends at 8 but the shard has 16"),
        (lambda q, k, v: ring_attention(q, k, v, local_cu_seqlens=(0, 8, 16)), "need batch 1"),
        (lambda q, k, v: ring_attention(q[:1], k[:1], v[:1], local_cu_seqlens=(0, 5, 16)), "local sequence 0 has 5 rows"),
        (lambda q, k, v: ring_attention(q, k, v, kernel="flash"), "kernel='flash' needs CUDA tensors"),
        (lambda q, k, v: dilated_attention(q, k, v, DilatedConfig(segment_lengths=(6,), dilation_rates=(1,))), "multiple of segment length 6"),
        (lambda q, k, v: dilated_attention(q[:, :3], k[:, :1], v[:, :1], DilatedConfig(segment_lengths=(4, 8), dilation_rates=(1, 2))), "multiples of the 2 head groups"),
    ],
)
def test_bad_arguments_are_refused_with_the_fix(call, message):
    q, k, v = _qkv(dtype=torch.float32)
    with pytest.raises(ValueError, match=message):
        call(q, k, v)


def test_dilated_config_validation():
    with pytest.raises(ValueError, match="segment length 6 must be a positive multiple of its dilation rate 4"):
        DilatedConfig(segment_lengths=(6,), dilation_rates=(4,))
    with pytest.raises(ValueError, match="equal length"):
        DilatedConfig(segment_lengths=(4, 8), dilation_rates=(1,))


def test_auto_head_chunks_keeps_groups_whole():
    from rankgate.workloads.ring_attention.ring import auto_head_chunks

    assert auto_head_chunks(32, 8) == 4  # 8 query heads, 2 key/value heads per call
    assert auto_head_chunks(32, 32) == 4
    assert auto_head_chunks(4, 2) == 1
    assert auto_head_chunks(48, 6) == 6
    assert auto_head_chunks(40, 5) == 5
    assert auto_head_chunks(24, 2) == 2


def test_auto_head_chunks_splits_only_long_shards():
    from rankgate.workloads.ring_attention.ring import auto_head_chunks

    # 32/8 heads at world 2: 16K tokens (8K rows a rank) in one call, 32K in two, 64K
    # and longer in four (one per 8 query heads, the most auto takes)
    assert [auto_head_chunks(32, 8, rows) for rows in (8192, 16384, 32768, 65536)] == [1, 2, 4, 4]
    assert auto_head_chunks(32, 8, rows=1) == 1
    assert auto_head_chunks(48, 6, rows=3 * 8192) == 3  # 3 divides 6
    assert auto_head_chunks(40, 5, rows=2 * 8192) == 1  # 3 wanted; 3 and 2 do not divide 5


def test_fused_kernel_records_why_it_left_cudnn_and_tries_flash():
    from rankgate.workloads.ring_attention import kernels

    q = torch.zeros(1, 2, 8, 16, dtype=torch.bfloat16)  # on the CPU both fused ops refuse
    kernels.FUSED_FALLBACKS.clear()
    try:
        with pytest.raises((RuntimeError, NotImplementedError)):
            kernels.FusedKernel().forward(q, q, q, True, 0.25)
        reason = kernels.FUSED_FALLBACKS[("cpu", "torch.bfloat16")]
        assert reason.startswith("cuDNN forward: ")
    finally:
        kernels.FUSED_FALLBACKS.clear()


def test_fused_kernel_stays_on_cudnn_after_running_out_of_memory():
    # Memory is not cuDNN refusing the shapes: a memory-capped probe once sent every later
    # call of the process to flash, and the bench's header then named the wrong kernel.
    from rankgate.workloads.ring_attention import kernels

    class OutOfMemory:
        def forward(self, *args):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 820.00 MiB")

    fused = kernels.FusedKernel()
    fused._cudnn = OutOfMemory()
    q = torch.zeros(1, 2, 8, 16, dtype=torch.bfloat16)
    kernels.FUSED_FALLBACKS.clear()
    try:
        with pytest.raises(torch.OutOfMemoryError, match=r"820\.00 MiB"):
            fused.forward(q, q, q, True, 0.25)
        assert kernels.FUSED_FALLBACKS == {} and fused.name == "cudnn"
    finally:
        kernels.FUSED_FALLBACKS.clear()


def test_forced_fused_kernels_need_cuda_half_precision():
    q = torch.zeros(1, 2, 8, 16)
    for name in ("cudnn", "flash"):
        with pytest.raises(ValueError, match=f"kernel='{name}' needs CUDA tensors in fp16/bf16"):
            ring_attention(q, q, q, kernel=name)
    with pytest.raises(ValueError, match="unknown kernel 'fa3'"):
        ring_attention(q, q, q, kernel="fa3")
