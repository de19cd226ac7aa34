"""Bengio-style neural n-gram model: embed the last ``context`` tokens, concatenate, MLP to the vocabulary."""

from __future__ import annotations

import torch
from torch import nn

from .config import DDPConfig


class NGramLM(nn.Module):
    """Predicts the next token from a fixed window; no attention, so DDP's all-reduce dominates at scale."""

    def __init__(self, cfg: DDPConfig) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.hidden = nn.Linear(cfg.context * cfg.dim, cfg.hidden)
        self.out = nn.Linear(cfg.hidden, cfg.vocab_size)

    def forward(self, context: torch.Tensor) -> torch.Tensor:
        """``[batch, context]`` ids to ``[batch, vocab]`` logits."""
        x = self.embed(context).flatten(1)
        return self.out(torch.nn.functional.gelu(self.hidden(x)))

    def matmul_params(self) -> int:
        """Weights that take part in matrix products (the embedding is a lookup): the N of 6N."""
        return self.hidden.weight.numel() + self.out.weight.numel()
