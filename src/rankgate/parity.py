"""Degree-1 against degree-N: compare a baseline run with a parallel run, tensor by tensor.

Vocabulary: the *expected* tensors come from the degree-1 baseline (one process, the
whole problem); the *actual* tensors from the degree-N run (reconstructed where the
run shards them). Each rank compares what it has (:func:`compare`), then the ranks
agree on one verdict (:func:`verdict`): rank 0 holds every rank's report, every rank
gets the same pass/fail, so a multi-rank test fails on all ranks at once.
:func:`assert_parity` does both and raises with a readable diff.

Per tensor: the largest absolute error with its index and both values there, the
root-mean-square error, the relative L2 error ``‖actual - expected‖ / ‖expected‖``,
the fraction of elements within ``atol + rtol·|expected|``, and the cosine similarity.
A tensor passes when shapes agree, NaN and infinity sit in the same places, at least
``min_fraction`` of its elements are within tolerance (default: all of them) and its
relative L2 error is at most ``max_rel_l2``. The relative L2 bound keeps the check
meaningful for small-magnitude tensors (gradients), where ``atol`` alone would accept
anything.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import torch
import torch.distributed as dist


@dataclass(frozen=True, kw_only=True, slots=True)
class Tolerance:
    """How far a degree-N result may be from the baseline."""

    atol: float
    """Absolute part of the element-wise bound ``atol + rtol * |expected|``."""
    rtol: float
    """Relative part of the element-wise bound."""
    max_rel_l2: float
    """Largest allowed ``‖actual - expected‖ / ‖expected‖`` over the whole tensor."""

    def __post_init__(self) -> None:
        for name in ("atol", "rtol", "max_rel_l2"):
            value = getattr(self, name)
            if not value >= 0:
                raise ValueError(f"Tolerance.{name}={value} must be a number >= 0")


DEFAULT_TOLERANCES: Mapping[torch.dtype, Tolerance] = MappingProxyType(
    {
        # Summation order differs between degree 1 and N (a ring merges partial
        # results, a reduction adds per-rank gradients): a few hundred ulps in fp32.
        torch.float64: Tolerance(atol=1e-12, rtol=1e-10, max_rel_l2=1e-10),
        torch.float32: Tolerance(atol=1e-5, rtol=1e-5, max_rel_l2=1e-5),
        # One rounding of each side to 8 (bf16) or 11 (fp16) significant bits, plus the
        # reordering above done in that precision: two ulps element-wise, and the
        # relative L2 error that bf16/fp16 operands give (about 1e-3 to 1e-2).
        torch.bfloat16: Tolerance(atol=1e-2, rtol=1.6e-2, max_rel_l2=1e-2),
        torch.float16: Tolerance(atol=1e-3, rtol=2e-3, max_rel_l2=2e-3),
    }
)
"""Tolerance by the lower precision of the two tensors compared."""


def default_tolerance(*dtypes: torch.dtype) -> Tolerance:
    """The default tolerance for the least precise of ``dtypes``."""
    order = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
    floats = [d for d in dtypes if d in DEFAULT_TOLERANCES]
    if not floats:
        raise ValueError(
            f"no default tolerance for {', '.join(map(str, dtypes))}: pass tolerance=Tolerance(...)"
        )
    return DEFAULT_TOLERANCES[max(floats, key=order.index)]


@dataclass(frozen=True, slots=True, kw_only=True)
class TensorParity:
    """One tensor's comparison (plain Python values, so it pickles across ranks)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    ok: bool
    problem: str = ""
    """Why it failed, in words ("" when it passed)."""
    max_abs: float = 0.0
    max_abs_index: tuple[int, ...] = ()
    actual_at_max: float = 0.0
    expected_at_max: float = 0.0
    rmse: float = 0.0
    rel_l2: float = 0.0
    fraction_within: float = 1.0
    cosine: float = 1.0
    tolerance: Tolerance | None = None
    min_fraction: float = 1.0

    def line(self) -> str:
        """One line: name, verdict and every figure."""
        head = f"{self.name}  {self.dtype} {tuple(self.shape)}  {'ok' if self.ok else 'FAIL'}"
        if self.tolerance is None:  # shape or dtype problem: no figures
            return f"{head}  {self.problem}"
        tol = self.tolerance
        text = (
            f"{head}  max|diff| {self.max_abs:.3e} at {self.max_abs_index} "
            f"(got {self.actual_at_max:.6g}, want {self.expected_at_max:.6g})  "
            f"rmse {self.rmse:.3e}  rel_l2 {self.rel_l2:.3e} (<= {tol.max_rel_l2:.1e})  "
            f"within {100 * self.fraction_within:.3f}% (>= {100 * self.min_fraction:g}%, "
            f"atol {tol.atol:.1e} rtol {tol.rtol:.1e})  cos {self.cosine:.6f}"
        )
        return f"{text}  -- {self.problem}" if self.problem else text


@dataclass(frozen=True, slots=True, kw_only=True)
class ParityReport:
    """One rank's comparisons."""

    rank: int
    tensors: tuple[TensorParity, ...]

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.tensors)

    @property
    def failed(self) -> tuple[TensorParity, ...]:
        return tuple(t for t in self.tensors if not t.ok)

    def describe(self) -> str:
        """Failing tensors first, then the passing ones, one line each."""
        rows = sorted(self.tensors, key=lambda t: t.ok)
        return "\n".join(f"rank {self.rank}  {t.line()}" for t in rows)


@dataclass(frozen=True, slots=True, kw_only=True)
class ParityVerdict:
    """Every rank's report, as rank 0 sees them (other ranks see only ``ok``)."""

    ok: bool
    failing_ranks: tuple[int, ...]
    reports: tuple[ParityReport, ...] = field(default=())

    def describe(self, what: str = "") -> str:
        label = f"{what}: " if what else ""
        if not self.reports:
            state = "passed" if self.ok else f"FAILED on ranks {list(self.failing_ranks)}"
            return f"{label}parity {state} (rank 0 has the diff)"
        total = sum(len(r.tensors) for r in self.reports)
        bad = sum(len(r.failed) for r in self.reports)
        world = len(self.reports)
        head = (
            f"{label}parity passed: {total} tensors on {world} rank(s)"
            if self.ok
            else f"{label}parity FAILED: {bad} of {total} tensors outside tolerance on "
            f"rank(s) {list(self.failing_ranks)} (world {world})"
        )
        return "\n".join([head, *(r.describe() for r in self.reports)])


def compare_tensor(
    name: str,
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    tolerance: Tolerance | None = None,
    min_fraction: float = 1.0,
) -> TensorParity:
    """Compare one tensor of the degree-N run with the baseline's."""
    base = {"name": name, "shape": tuple(expected.shape), "dtype": _dtype_label(actual, expected)}
    if not isinstance(actual, torch.Tensor) or not isinstance(expected, torch.Tensor):
        return TensorParity(**base, ok=False, problem="not a tensor on both sides")
    if actual.shape != expected.shape:
        problem = f"shape {tuple(actual.shape)} != baseline {tuple(expected.shape)}"
        return TensorParity(**base, ok=False, problem=problem)
    tol = tolerance or default_tolerance(actual.dtype, expected.dtype)
    work = torch.float64
    a = actual.detach().to("cpu", work)
    e = expected.detach().to("cpu", work)
    if a.numel() == 0:
        return TensorParity(**base, ok=True, tolerance=tol, min_fraction=min_fraction)

    # NaN never passes (on either side); infinities must sit in the same places.
    nan_count = int(torch.isnan(a).sum() + torch.isnan(e).sum())
    same_inf = torch.equal(torch.isposinf(a), torch.isposinf(e)) and torch.equal(
        torch.isneginf(a), torch.isneginf(e)
    )
    finite = torch.isfinite(a) & torch.isfinite(e)
    both_inf = torch.isinf(a) & (a == e)
    diff = torch.where(finite, (a - e).abs(), torch.where(both_inf, 0.0, math.inf))
    flat = int(torch.argmax(diff).item())
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape))
    within = diff <= tol.atol + tol.rtol * e.abs().where(finite, 0.0)
    fraction = float(within.double().mean().item())
    rel_l2, cosine, rmse = _norm_statistics(a[finite], e[finite])
    problems = []
    if nan_count:
        problems.append(f"{nan_count} NaN (NaN never passes)")
    if not same_inf:
        problems.append("infinities differ")
    if fraction < min_fraction:
        problems.append(f"{int((~within).sum())} elements outside atol + rtol*|want|")
    if rel_l2 > tol.max_rel_l2:
        problems.append("relative L2 error too large")
    return TensorParity(
        **base,
        ok=not problems,
        problem="; ".join(problems),
        max_abs=float(diff.reshape(-1)[flat].item()),
        max_abs_index=index,
        actual_at_max=float(a.reshape(-1)[flat].item()),
        expected_at_max=float(e.reshape(-1)[flat].item()),
        rmse=rmse,
        rel_l2=rel_l2,
        fraction_within=fraction,
        cosine=cosine,
        tolerance=tol,
        min_fraction=min_fraction,
    )


def _norm_statistics(af: torch.Tensor, ef: torch.Tensor) -> tuple[float, float, float]:
    """Relative L2 error, cosine similarity and RMSE of the finite elements (flat, float64)
    of the degree-N run (``af``) against the baseline's (``ef``)."""
    err_norm = float(torch.linalg.vector_norm(af - ef).item())
    ref_norm = float(torch.linalg.vector_norm(ef).item())
    act_norm = float(torch.linalg.vector_norm(af).item())
    rel_l2 = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else math.inf)
    cosine = float((af @ ef).item() / (act_norm * ref_norm)) if act_norm * ref_norm > 0 else (
        1.0 if err_norm == 0 else 0.0
    )
    rmse = float(((af - ef) ** 2).mean().sqrt().item()) if af.numel() else 0.0
    return rel_l2, cosine, rmse


def compare(
    actual: Mapping[str, torch.Tensor] | torch.Tensor,
    expected: Mapping[str, torch.Tensor] | torch.Tensor,
    *,
    tolerance: Tolerance | Mapping[str, Tolerance] | None = None,
    min_fraction: float = 1.0,
    rank: int | None = None,
) -> ParityReport:
    """Compare tensors by name (or two single tensors); names must match on both sides.

    ``tolerance``: one for every tensor, or a mapping name -> Tolerance (names absent
    from it get the dtype default).
    """
    if isinstance(actual, torch.Tensor) or isinstance(expected, torch.Tensor):
        actual, expected = {"tensor": actual}, {"tensor": expected}
    if not 0.0 <= min_fraction <= 1.0:
        raise ValueError(f"min_fraction={min_fraction} must be in [0, 1]")
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    rows = []
    for name in expected:
        if name in missing:
            shape = tuple(expected[name].shape)
            problem = "missing from the degree-N run"
            rows.append(TensorParity(name=name, shape=shape, dtype="-", ok=False, problem=problem))
            continue
        tol = tolerance.get(name) if isinstance(tolerance, Mapping) else tolerance
        rows.append(compare_tensor(name, actual[name], expected[name], tolerance=tol,
                                   min_fraction=min_fraction))  # fmt: skip
    for name in extra:
        shape = tuple(actual[name].shape)
        problem = "not in the baseline"
        rows.append(TensorParity(name=name, shape=shape, dtype="-", ok=False, problem=problem))
    if rank is None:
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    return ParityReport(rank=rank, tensors=tuple(rows))


def verdict(report: ParityReport, group: dist.ProcessGroup | None = None) -> ParityVerdict:
    """Collect every rank's report on rank 0; every rank learns the shared outcome.

    A collective: every rank of ``group`` must call it. Without an initialised process
    group it is this process's verdict alone.
    """
    if not (dist.is_available() and dist.is_initialized()):
        failing = () if report.ok else (report.rank,)
        return ParityVerdict(ok=report.ok, failing_ranks=failing, reports=(report,))
    every: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(every, report, group=group)
    failing = tuple(r.rank for r in every if not r.ok)
    mine = dist.get_rank(group) == 0
    return ParityVerdict(
        ok=not failing, failing_ranks=failing, reports=tuple(every) if mine else ()
    )


def assert_parity(
    actual: Mapping[str, torch.Tensor] | torch.Tensor,
    expected: Mapping[str, torch.Tensor] | torch.Tensor,
    *,
    what: str = "",
    tolerance: Tolerance | Mapping[str, Tolerance] | None = None,
    min_fraction: float = 1.0,
    group: dist.ProcessGroup | None = None,
) -> ParityVerdict:
    """:func:`compare` then :func:`verdict`; raise AssertionError on every rank if any failed.

    Rank 0's message carries every rank's diff; the others name the failing ranks and
    their own diff. Returns the verdict when everything passed.
    """
    report = compare(actual, expected, tolerance=tolerance, min_fraction=min_fraction)
    result = verdict(report, group)
    if not result.ok:
        text = result.describe(what)
        if not result.reports:
            text += "\n" + report.describe()
        raise AssertionError(text)
    return result


def _dtype_label(actual, expected) -> str:
    a = str(getattr(actual, "dtype", type(actual).__name__)).replace("torch.", "")
    e = str(getattr(expected, "dtype", type(expected).__name__)).replace("torch.", "")
    return a if a == e else f"{a} vs {e}"
