"""Host references for the collectives, the inputs they are checked on, and the check.

Every rank builds every rank's input from (seed, rank), so each rank can compute
the expected result of a collective on the host without communicating. Two kinds of
input:

* ``"int"``: random integers in [-8, 8] in the tensor's dtype. Every dtype holds
  them and every partial sum over up to 16 ranks exactly, so results are bit-exact
  whatever order a backend reduces in. Used for the size sweep.
* ``"normal"``: standard normal values (integers in ±2**20 for int32). Sums are
  bit-exact when the reduction order is fixed (two ranks: one correctly rounded
  addition, the same everywhere); otherwise within ``sum_tolerance``.
"""

from __future__ import annotations

from collections import OrderedDict

import torch

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "int32": torch.int32,
}
COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "reduce_scatter", "gather", "send_recv")
INPUT_KINDS = ("int", "normal")


def rank_input(
    rank: int, numel: int, dtype: torch.dtype, *, seed: int, kind: str = "int"
) -> torch.Tensor:
    """Rank ``rank``'s input (CPU), the same on whichever rank builds it."""
    if kind not in INPUT_KINDS:
        raise ValueError(f"unknown input kind {kind!r}; valid: {', '.join(INPUT_KINDS)}")
    if kind == "int":
        return int_draw(rank, numel, seed=seed).to(dtype)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + rank)
    if dtype.is_floating_point:
        return torch.randn(numel, generator=gen).to(dtype)
    return torch.randint(-(2**20), 2**20, (numel,), generator=gen, dtype=torch.int32).to(dtype)


def int_draw(rank: int, numel: int, *, seed: int) -> torch.Tensor:
    """The integers of rank ``rank``'s ``"int"`` input, as int8: one draw serves every
    dtype of that many elements."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + rank)
    # int8 draws the same values as int32 does, a quarter faster
    return torch.randint(-8, 9, (numel,), generator=gen, dtype=torch.int8)


class KeptDraws:
    """``rank_input`` of kind ``"int"`` whose large draws are kept for the calls after.

    A sweep checks six collectives and two dtypes of each element count on the same
    (seed, rank, numel) draw, and a rank of an all_reduce draws every rank's input: on
    one core a 64 MiB fp16 input takes 0.1 s to draw and 0.05 s to convert. Draws of
    ``min_numel`` elements and more are kept, ``max_bytes`` at most (the oldest used goes
    first); each call converts anew, so no result ever aliases a kept draw.
    """

    def __init__(self, *, min_numel: int = 1 << 20, max_bytes: int = 256 << 20) -> None:
        self.min_numel = min_numel
        self.max_bytes = max_bytes
        self._kept: OrderedDict[tuple[int, int, int], torch.Tensor] = OrderedDict()

    def rank_input(self, rank: int, numel: int, dtype: torch.dtype, *, seed: int) -> torch.Tensor:
        if numel < self.min_numel or numel > self.max_bytes:  # int8: a byte an element
            return rank_input(rank, numel, dtype, seed=seed)
        key = (seed, rank, numel)
        draw = self._kept.get(key)
        if draw is None:
            draw = self._kept[key] = int_draw(rank, numel, seed=seed)
            while sum(kept.numel() for kept in self._kept.values()) > self.max_bytes:
                self._kept.popitem(last=False)
        self._kept.move_to_end(key)
        return draw.to(dtype, copy=True)


_SUM_CHUNK = 1 << 16
"""Elements summed at a time: the wide partial sums stay in cache (5x faster on 64 MiB)."""


def exact_sum(inputs: list[torch.Tensor]) -> torch.Tensor:
    """Elementwise sum in float64 (int64 for integers), as the caller's dtype."""
    wide = torch.float64 if inputs[0].dtype.is_floating_point else torch.int64
    out = torch.empty(inputs[0].shape, dtype=inputs[0].dtype)
    flat_out, flats = out.view(-1), [t.reshape(-1) for t in inputs]
    for start in range(0, flat_out.numel(), _SUM_CHUNK):
        part = slice(start, start + _SUM_CHUNK)
        total = flats[0][part].to(wide)
        for t in flats[1:]:
            total += t[part]
        flat_out[part] = total  # one rounding to the dtype, as .to() rounds
    return out


def rank_order_sum(inputs: list[torch.Tensor]) -> torch.Tensor:
    """The sum a fixed-order kernel (p2p push) must give, bit for bit.

    float32 accumulation in rank order, ``((x0 + x1) + x2) + ...``, rounded once to the
    inputs' dtype (round to nearest even, as torch's casts): the same additions on every
    rank, so every rank holds the same bits.
    """
    acc = inputs[0].to(torch.float32)
    for t in inputs[1:]:
        acc = acc + t.to(torch.float32)
    return acc.to(inputs[0].dtype)


def spread_normal(numel: int, dtype: torch.dtype, *, seed: int) -> torch.Tensor:
    """Random floats (CPU) whose sums round: normals scaled by 2**k, k in [-16, 16].

    Exponents this far apart make float32 partial sums of float32 and of bfloat16 inputs
    inexact, so a kernel that truncates instead of rounding, or adds in another order,
    gets different bits.
    """
    gen = torch.Generator().manual_seed(seed)
    scale = torch.exp2(torch.randint(-16, 17, (numel,), generator=gen).to(torch.float32))
    return (torch.randn(numel, generator=gen) * scale).to(dtype)


def sum_tolerance(inputs: list[torch.Tensor]) -> torch.Tensor:
    """Bound on |backend sum - exact sum| for any reduction order (float64, elementwise).

    Each of the n-1 additions rounds once, by at most eps/2 of a partial sum, and no
    partial sum exceeds sum|x|; the final cast to the dtype rounds once more. So
    (n-1)·eps/2·sum|x| + eps/2·|sum| <= n·eps·sum|x|.
    """
    eps = torch.finfo(inputs[0].dtype).eps if inputs[0].dtype.is_floating_point else 0.0
    abs_sum = torch.zeros(inputs[0].shape, dtype=torch.float64)
    for t in inputs:
        abs_sum += t.to(torch.float64).abs()
    return len(inputs) * eps * abs_sum


def expected(collective: str, inputs: list[torch.Tensor], rank: int, root: int = 0):
    """What ``rank`` should hold after ``collective`` on ``inputs`` (one per rank).

    all_reduce / reduce_scatter: the sum (reduce_scatter: this rank's slice);
    broadcast: root's input; all_gather: the concatenation; gather: the list on the
    root, None elsewhere; send_recv: the ring shift, rank r gets rank r-1's input.
    """
    world = len(inputs)
    if collective == "all_reduce":
        return exact_sum(inputs)
    if collective == "reduce_scatter":
        return exact_sum(inputs).chunk(world)[rank]
    if collective == "broadcast":
        return inputs[root]
    if collective == "all_gather":
        return torch.cat(inputs)
    if collective == "gather":
        return list(inputs) if rank == root else None
    if collective == "send_recv":
        return inputs[(rank - 1) % world]
    raise ValueError(f"unknown collective {collective!r}; valid: {', '.join(COLLECTIVES)}")


def mismatches(out: torch.Tensor, ref: torch.Tensor, bound: torch.Tensor | None = None) -> int:
    """Number of wrong elements: bit-exact comparison, or |out-ref| <= bound when given."""
    out = out.detach().cpu()
    if out.shape != ref.shape or out.dtype != ref.dtype:
        return max(out.numel(), ref.numel())
    if bound is None:
        if torch.equal(out, ref):  # the common case, 4x faster on 64 MiB of fp16: NaN != NaN
            return 0
        if out.dtype.is_floating_point:
            # bitwise: NaN never passes, -0.0 and 0.0 are told apart only by value here
            return int((out != ref).sum()) + int(torch.isnan(out).sum())
        return int((out != ref).sum())
    diff = (out.to(torch.float64) - ref.to(torch.float64)).abs()
    return int((~(diff <= bound)).sum())


def check(out: torch.Tensor, ref: torch.Tensor, bound: torch.Tensor | None = None, *, what=""):
    """Raise AssertionError naming the first wrong element, how many, and the rule used."""
    wrong = mismatches(out, ref, bound)
    if not wrong:
        return
    out_c = out.detach().cpu()
    if out_c.shape != ref.shape or out_c.dtype != ref.dtype:
        raise AssertionError(
            f"{what}: got {tuple(out_c.shape)} {out_c.dtype}, "
            f"expected {tuple(ref.shape)} {ref.dtype}"
        )
    flat_out, flat_ref = out_c.reshape(-1), ref.reshape(-1)
    if bound is None:
        bad = (flat_out != flat_ref) | (
            torch.isnan(flat_out) if out_c.is_floating_point() else False
        )
        rule = "bit-exact"
    else:
        diff = (flat_out.to(torch.float64) - flat_ref.to(torch.float64)).abs()
        bad = ~(diff <= bound.reshape(-1))
        rule = "|out - exact| <= n*eps*sum|x|"
    i = int(bad.nonzero()[0])
    raise AssertionError(
        f"{what}: {wrong} of {flat_ref.numel()} elements wrong ({rule}); first at {i}: "
        f"got {flat_out[i].item()}, expected {flat_ref[i].item()}"
    )


def poison(dtype: torch.dtype) -> float | int:
    """A value no correct result holds: NaN for floats, an integer outside the inputs' range."""
    if dtype.is_floating_point:
        return float("nan")
    info = torch.iinfo(dtype)
    return 100 if info.min == 0 else info.min + 7  # inputs are small (|x| <= 2**20 + sums)


def run_collective(backend, collective: str, inputs: list[torch.Tensor], root: int = 0):
    """Run ``collective`` on ``backend`` with this rank's input; return what the rank holds.

    Outputs start poisoned, so an element nobody wrote is caught. ``send_recv`` is
    the ring shift (rank r sends to r+1 and receives from r-1); reduce_scatter's
    inputs are world x the output size.
    """
    rank, world, device = backend.rank, backend.world_size, backend.device
    mine = inputs[rank].to(device, copy=True)  # in-place collectives must not touch inputs
    bad = poison(mine.dtype)
    if collective == "all_reduce":
        return backend.all_reduce(mine)
    if collective == "broadcast":
        buf = mine if rank == root else torch.full_like(mine, bad)
        return backend.broadcast(buf, root)
    if collective == "all_gather":
        out = torch.full((world * mine.numel(),), bad, dtype=mine.dtype, device=device)
        return backend.all_gather(out, mine)
    if collective == "reduce_scatter":
        out = torch.full((mine.numel() // world,), bad, dtype=mine.dtype, device=device)
        return backend.reduce_scatter(out, mine)
    if collective == "gather":
        return backend.gather(mine, root)
    if collective == "send_recv":
        got = torch.full_like(mine, bad)
        nxt, prev = (rank + 1) % world, (rank - 1) % world
        if rank % 2 == 0:  # even ranks send first, odd ranks receive first: no cycle of waits
            backend.send(mine, nxt)
            backend.recv(got, prev)
        else:
            backend.recv(got, prev)
            backend.send(mine, nxt)
        return got
    raise ValueError(f"unknown collective {collective!r}; valid: {', '.join(COLLECTIVES)}")
