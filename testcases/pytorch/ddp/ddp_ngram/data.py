"""Synthetic, learnable batches: windows of a fixed random permutation walk, a function of (step, rank)."""

from __future__ import annotations

import torch


def batch(
    step: int, rank: int, batch_size: int, context: int, vocab: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``context`` tokens and the next one; the permutation depends on ``seed`` only, so it can be learnt."""
    perm = torch.randperm(vocab, generator=torch.Generator().manual_seed(seed))
    gen = torch.Generator().manual_seed(seed * 7919 + step * 131 + rank)
    rows = [torch.randint(0, vocab, (batch_size,), generator=gen)]
    for _ in range(context):
        rows.append(perm[rows[-1]])
    window = torch.stack(rows, dim=1)
    return window[:, :context], window[:, context]
