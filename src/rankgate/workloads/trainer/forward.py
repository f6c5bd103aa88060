"""How a packed minibatch goes through a model: the tiny transformer or a Hugging Face one.

Packed rows hold several samples; each token attends only to earlier tokens of its
own sample (a block-diagonal causal mask from the document ids) at positions that
restart per sample, so a packed row computes exactly what the samples would alone.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from rankgate.workloads.data.collator import PackedMinibatch

Forward = Callable[[nn.Module, PackedMinibatch], torch.Tensor]
"""(model, minibatch) -> logits (1, tokens, vocab)."""


def document_mask(document_ids: torch.Tensor) -> torch.Tensor:
    """(batch, 1, seq, seq) boolean: True where a query may attend to a key."""
    seq = document_ids.shape[-1]
    same = document_ids[:, :, None] == document_ids[:, None, :]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=document_ids.device).tril()
    return (same & causal)[:, None]


def document_attention(document_ids: torch.Tensor):
    """An ``attention`` for TinyTransformer.forward that keeps the samples of a row apart."""
    mask = document_mask(document_ids)

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    return attention


def tiny_forward(model: nn.Module, minibatch: PackedMinibatch) -> torch.Tensor:
    """TinyTransformer (rankgate.workloads.model), wrapped or not."""
    return model(
        minibatch.input_ids,
        positions=minibatch.position_ids,
        attention=document_attention(minibatch.document_ids),
    )


def hf_forward(model: nn.Module, minibatch: PackedMinibatch) -> torch.Tensor:
    """A Hugging Face causal LM: a 4-D boolean mask is used as given."""
    return model(
        input_ids=minibatch.input_ids,
        position_ids=minibatch.position_ids,
        attention_mask=document_mask(minibatch.document_ids),
    ).logits
