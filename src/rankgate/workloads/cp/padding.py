"""Padding and packing so that every sequence splits into ``2·cp`` equal chunks.

Padding goes at the end of each sequence. Under a causal mask no real token attends
to a pad (pads come later), and pads carry the ignore label, so the loss and every
gradient are those of the unpadded batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100
"""Label of tokens the loss skips (``torch.nn.functional.cross_entropy``'s default)."""


def padded_length(length: int, cp: int) -> int:
    """``length`` rounded up to a multiple of ``2·cp``."""
    if cp < 1:
        raise ValueError(f"cp={cp} must be >= 1")
    return -(-length // (2 * cp)) * (2 * cp)


def pad_to_multiple(
    x: torch.Tensor, multiple: int, *, dim: int = 1, value: float = 0
) -> torch.Tensor:
    """``x`` padded with ``value`` at the end of ``dim`` to a multiple of ``multiple``."""
    if multiple < 1:
        raise ValueError(f"multiple={multiple} must be >= 1")
    extra = -x.shape[dim] % multiple
    if extra == 0:
        return x
    dim = dim % x.dim()
    pad = [0, 0] * (x.dim() - 1 - dim) + [0, extra]
    return F.pad(x, pad, value=value)


def next_token_labels(
    tokens: torch.Tensor, lengths: torch.Tensor | None = None, *, ignore_index: int = IGNORE_INDEX
) -> torch.Tensor:
    """Labels for BSHD ``tokens`` (batch, seq): the next token, ``ignore_index`` at the
    last real token and on padding (positions >= ``lengths[b]``, when given)."""
    labels = torch.full_like(tokens, ignore_index)
    labels[:, :-1] = tokens[:, 1:]
    seq = tokens.shape[1]
    lengths = torch.full((tokens.shape[0],), seq) if lengths is None else lengths.cpu()
    pos = torch.arange(seq)
    labels[(pos[None, :] >= lengths[:, None] - 1).to(tokens.device)] = ignore_index
    return labels


@dataclass(frozen=True, slots=True)
class PackedBatch:
    """Packed (THD) sequences, each padded to a multiple of ``2·cp``."""

    tokens: torch.Tensor
    """(total,) token ids."""
    labels: torch.Tensor
    """(total,) next token within the same sequence, else the ignore index."""
    positions: torch.Tensor
    """(total,) position of each token within its sequence."""
    cu_seqlens: torch.Tensor
    """(n + 1,) boundaries of the padded sequences."""
    lengths: tuple[int, ...]
    """Real (unpadded) length of each sequence."""


def pack_sequences(
    sequences: Sequence[torch.Tensor],
    *,
    cp: int,
    pad_id: int = 0,
    ignore_index: int = IGNORE_INDEX,
) -> PackedBatch:
    """Concatenate 1-D token sequences, padding each to a multiple of ``2·cp``."""
    if not sequences:
        raise ValueError("pack_sequences needs at least one sequence")
    tokens, labels, positions, bounds, lengths = [], [], [], [0], []
    for i, seq in enumerate(sequences):
        if seq.dim() != 1 or seq.numel() == 0:
            raise ValueError(
                f"sequence {i} has shape {tuple(seq.shape)}: pass non-empty 1-D token tensors"
            )
        n = seq.numel()
        total = padded_length(n, cp)
        padded = torch.full((total,), pad_id, dtype=seq.dtype, device=seq.device)
        padded[:n] = seq
        label = torch.full_like(padded, ignore_index)
        label[: n - 1] = seq[1:]
        tokens.append(padded)
        labels.append(label)
        positions.append(torch.arange(total, device=seq.device))
        bounds.append(bounds[-1] + total)
        lengths.append(n)
    return PackedBatch(
        tokens=torch.cat(tokens),
        labels=torch.cat(labels),
        positions=torch.cat(positions),
        cu_seqlens=torch.tensor(bounds),
        lengths=tuple(lengths),
    )
