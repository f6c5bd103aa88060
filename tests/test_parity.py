"""The parity helper: figures, dtype defaults, failures that name the problem."""

from __future__ import annotations

import math

import pytest
import torch

from rankgate.parity import (
    DEFAULT_TOLERANCES,
    Tolerance,
    assert_parity,
    compare,
    compare_tensor,
    default_tolerance,
    verdict,
)

pytestmark = pytest.mark.unit


def _randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def test_identical_tensors_pass_with_perfect_figures():
    x = _randn(4, 5)
    row = compare_tensor("x", x, x.clone())
    assert row.ok and row.max_abs == 0 and row.rmse == 0 and row.rel_l2 == 0
    assert row.fraction_within == 1.0 and row.cosine == pytest.approx(1.0)


def test_max_error_is_located_with_both_values():
    want = torch.zeros(3, 4)
    got = want.clone()
    got[2, 1] = 0.5
    row = compare_tensor("x", got, want)
    assert not row.ok
    assert row.max_abs == 0.5 and row.max_abs_index == (2, 1)
    assert (row.actual_at_max, row.expected_at_max) == (0.5, 0.0)
    assert row.fraction_within == pytest.approx(11 / 12)
    assert row.rmse == pytest.approx(math.sqrt(0.25 / 12))
    assert "1 elements outside" in row.problem


def test_fp32_reordering_error_passes_and_a_real_bug_fails():
    x = _randn(64, 64, seed=1)
    reordered = (x.double() * (1 + 1e-7)).float()  # a few ulps: reduction order
    assert compare_tensor("x", reordered, x).ok
    assert not compare_tensor("x", x * 1.001, x).ok


def test_bf16_tolerance_accepts_rounding_but_not_a_wrong_block():
    ref = _randn(32, 32, seed=2)
    got = ref.to(torch.bfloat16)
    assert compare_tensor("x", got, ref).tolerance == DEFAULT_TOLERANCES[torch.bfloat16]
    assert compare_tensor("x", got, ref).ok
    broken = got.clone()
    broken[:4] = 0  # one block of rows never written
    assert not compare_tensor("x", broken, ref).ok


def test_small_magnitude_tensor_is_still_checked_by_relative_l2():
    ref = _randn(100, seed=3) * 1e-4
    wrong = ref * 1.5  # inside bf16's atol everywhere, yet 50% off
    row = compare_tensor("grad", wrong.to(torch.bfloat16), ref)
    assert row.fraction_within == 1.0
    assert not row.ok and "relative L2" in row.problem


def test_nan_never_passes_and_infinities_must_match():
    x = torch.tensor([1.0, 2.0, math.inf])
    assert compare_tensor("x", x, x.clone()).ok
    nan = torch.tensor([1.0, math.nan, math.inf])
    assert "NaN" in compare_tensor("x", nan, nan.clone()).problem
    assert "infinities differ" in compare_tensor("x", x, torch.tensor([1.0, 2.0, -math.inf])).problem


def test_shape_mismatch_and_missing_names_are_reported():
    report = compare({"a": torch.zeros(2), "extra": torch.zeros(1)}, {"a": torch.zeros(3), "b": torch.zeros(1)}, rank=0)
    problems = {t.name: t.problem for t in report.tensors}
    assert problems["a"] == "shape (2,) != baseline (3,)"
    assert problems["b"] == "missing from the degree-N run"
    assert problems["extra"] == "not in the baseline"
    assert not report.ok


def test_default_tolerance_takes_the_lower_precision_and_refuses_integers():
    assert default_tolerance(torch.float32, torch.bfloat16) == DEFAULT_TOLERANCES[torch.bfloat16]
    assert default_tolerance(torch.float64, torch.float32) == DEFAULT_TOLERANCES[torch.float32]
    with pytest.raises(ValueError, match="pass tolerance=Tolerance"):
        default_tolerance(torch.int64)
    with pytest.raises(ValueError, match="atol=-1"):
        Tolerance(atol=-1, rtol=0, max_rel_l2=0)


def test_min_fraction_lets_a_stated_share_of_elements_miss():
    want = torch.zeros(100)
    got = want.clone()
    got[:2] = 1e-4  # 2% of the elements beyond atol
    tol = Tolerance(atol=1e-6, rtol=0, max_rel_l2=math.inf)
    assert not compare_tensor("x", got, want, tolerance=tol).ok
    assert compare_tensor("x", got, want, tolerance=tol, min_fraction=0.98).ok


def test_single_process_verdict_and_readable_assertion():
    good = {"logits": _randn(3, 3)}
    assert verdict(compare(good, good)).ok
    with pytest.raises(AssertionError) as info:
        assert_parity({"logits": good["logits"] + 1}, good, what="cp=2 logits")
    text = str(info.value)
    assert text.startswith("cp=2 logits: parity FAILED: 1 of 1 tensors outside tolerance on rank(s) [0]")
    assert "rank 0  logits  float32 (3, 3)  FAIL  max|diff| 1.000e+00" in text
