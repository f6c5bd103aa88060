"""A tiny Hugging Face Llama from a config built in code (no download), where transformers is."""

from __future__ import annotations

import importlib.util

import torch
from torch import nn


def hf_unavailable_reason() -> str | None:
    """Why no Hugging Face model can be built here, or None."""
    if importlib.util.find_spec("transformers") is None:
        return "transformers is not installed (pip install transformers); the GPU hosts have it"
    return None


def build_hf_model(*, seed: int = 0, vocab_size: int = 256) -> nn.Module:
    """LlamaForCausalLM of about 0.1M parameters whose weights depend only on ``seed``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        attn_implementation="sdpa",
    )
    with torch.random.fork_rng(devices=[]):  # as build_model: the caller's generator stays
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)
