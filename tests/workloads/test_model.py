"""The shared tiny transformer: shapes, determinism, causality, config errors."""

from __future__ import annotations

import pytest
import torch

from rankgate.workloads.model import ModelConfig, build_model, token_loss_sum

pytestmark = pytest.mark.unit


def test_same_seed_same_weights_and_logits():
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    a, b = build_model(seed=3), build_model(seed=3)
    assert torch.equal(a(tokens), b(tokens))
    assert a(tokens).shape == (2, 16, 256)
    assert not torch.equal(build_model(seed=4)(tokens), a(tokens))


def test_build_model_leaves_global_rng_alone():
    torch.manual_seed(11)
    expected = torch.rand(3)
    torch.manual_seed(11)
    build_model(seed=0)
    assert torch.equal(torch.rand(3), expected)


def test_causal_a_later_token_does_not_change_earlier_logits():
    model = build_model(seed=0)
    tokens = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(2))
    changed = tokens.clone()
    changed[0, 8] = (changed[0, 8] + 1) % 256
    before, after = model(tokens), model(changed)
    assert torch.equal(before[:, :8], after[:, :8])
    assert not torch.equal(before[:, 8:], after[:, 8:])


def test_positions_matter():
    model = build_model(seed=0)
    tokens = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(3))
    shifted = torch.arange(8).unsqueeze(0) + 100
    assert not torch.allclose(model(tokens), model(tokens, positions=shifted))


def test_token_loss_sum_counts_only_labelled_tokens():
    logits = torch.zeros(1, 4, 256)
    labels = torch.tensor([[1, -100, 2, -100]])
    total, count = token_loss_sum(logits, labels)
    assert count.item() == 2
    assert total.item() == pytest.approx(2 * torch.log(torch.tensor(256.0)).item())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dim": 66, "n_heads": 4}, "dim=66 is not a multiple of n_heads=4"),
        ({"n_heads": 4, "n_kv_heads": 3}, "n_heads=4 is not a multiple of n_kv_heads=3"),
        ({"dim": 12, "n_heads": 4, "n_kv_heads": 1}, "head_dim=3 must be even"),
    ],
)
def test_bad_config_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**kwargs)
