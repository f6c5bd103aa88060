"""A tiny decoder-only transformer shared by the parallelism and training suites.

Embedding, ``n_layers`` blocks of RoPE attention (grouped-query when
``n_kv_heads < n_heads``) and a SwiGLU MLP with pre-norm residuals, a final norm and
an untied head. Small enough to train on two CPU cores, deterministic for a seed.

Attention is pluggable so context parallelism can swap in ring attention without a
second model: ``forward(tokens, positions=..., attention=fn)`` calls
``fn(q, k, v)`` with ``q`` shaped (batch, heads, seq, head_dim) and ``k``/``v``
(batch, kv_heads, seq, head_dim), RoPE already applied, and expects
(batch, heads, seq, head_dim) back. The default is causal full attention.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelConfig:
    """Shape of the tiny transformer."""

    vocab_size: int = 256
    """Token ids are in [0, vocab_size)."""
    dim: int = 64
    """Width of the residual stream."""
    n_layers: int = 2
    """Number of attention + MLP blocks."""
    n_heads: int = 4
    """Query heads; ``dim`` must be a multiple of it."""
    n_kv_heads: int = 2
    """Key/value heads; ``n_heads`` must be a multiple of it (grouped-query attention)."""
    mlp_hidden: int = 128
    """Hidden width of the SwiGLU MLP."""
    rope_theta: float = 10000.0
    """Base of the rotary position embedding."""

    def __post_init__(self) -> None:
        if self.dim % self.n_heads:
            raise ValueError(f"dim={self.dim} is not a multiple of n_heads={self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}"
            )
        if (self.dim // self.n_heads) % 2:
            raise ValueError(f"head_dim={self.dim // self.n_heads} must be even for RoPE")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention over the whole (unsharded) sequence; the default ``attention``."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def rotate(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Apply RoPE to ``x`` (batch, heads, seq, head_dim) at ``positions`` (batch, seq)."""
    half = x.shape[-1] // 2
    freqs = theta ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = positions.to(torch.float32)[:, None, :, None] * freqs  # (b, 1, s, half)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class SelfAttention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        kv_dim = config.n_kv_heads * config.head_dim
        self.wq = nn.Linear(config.dim, config.dim, bias=False)
        self.wk = nn.Linear(config.dim, kv_dim, bias=False)
        self.wv = nn.Linear(config.dim, kv_dim, bias=False)
        self.wo = nn.Linear(config.dim, config.dim, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, attention: Attention):
        batch, seq, _ = x.shape
        cfg = self.config

        def heads(t: torch.Tensor, n: int) -> torch.Tensor:
            return t.view(batch, seq, n, cfg.head_dim).transpose(1, 2)

        q = rotate(heads(self.wq(x), cfg.n_heads), positions, cfg.rope_theta)
        k = rotate(heads(self.wk(x), cfg.n_kv_heads), positions, cfg.rope_theta)
        v = heads(self.wv(x), cfg.n_kv_heads)
        out = attention(q, k, v)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, cfg.dim))


class TransformerBlock(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(config.dim)
        self.attention = SelfAttention(config)
        self.mlp_norm = nn.RMSNorm(config.dim)
        self.gate = nn.Linear(config.dim, config.mlp_hidden, bias=False)
        self.up = nn.Linear(config.dim, config.mlp_hidden, bias=False)
        self.down = nn.Linear(config.mlp_hidden, config.dim, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, attention: Attention):
        x = x + self.attention(self.attention_norm(x), positions, attention)
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class TinyTransformer(nn.Module):
    """Decoder-only transformer; ``forward`` returns logits (batch, seq, vocab)."""

    def __init__(self, config: ModelConfig | None = None) -> None:
        super().__init__()
        self.config = config or ModelConfig()
        self.embedding = nn.Embedding(self.config.vocab_size, self.config.dim)
        self.blocks = nn.ModuleList(
            TransformerBlock(self.config) for _ in range(self.config.n_layers)
        )
        self.norm = nn.RMSNorm(self.config.dim)
        self.head = nn.Linear(self.config.dim, self.config.vocab_size, bias=False)

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        attention: Attention = causal_attention,
    ) -> torch.Tensor:
        """``tokens`` (batch, seq) ids; ``positions`` (batch, seq), default 0..seq-1.

        Under context parallelism pass each rank's shard of tokens, its global
        positions and a ring attention that sees the other ranks' keys and values.
        """
        if positions is None:
            seq = tokens.shape[1]
            positions = torch.arange(seq, device=tokens.device).expand(tokens.shape[0], seq)
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x, positions, attention)
        return self.head(self.norm(x))


def build_model(config: ModelConfig | None = None, *, seed: int = 0) -> TinyTransformer:
    """A model whose initial weights depend only on ``seed`` (same on every rank)."""
    with torch.random.fork_rng(devices=[]):  # the caller's CPU generator is left as it was
        torch.manual_seed(seed)
        return TinyTransformer(config)


def token_loss_sum(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100):
    """Sum of next-token cross-entropy over labelled tokens, and their count.

    Returned as (sum, count) so a sharded run can all-reduce both and divide once:
    the loss is then weighted by tokens across ranks, exactly as one process computes it.
    """
    loss_sum = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(),
        labels.reshape(-1),
        ignore_index=ignore_index,
        reduction="sum",
    )
    return loss_sum, (labels != ignore_index).sum()
