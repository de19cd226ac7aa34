"""Per-step rows as numpy arrays: synthetic, or windows of a ``trainstack-tokens-v1`` directory.

The token files are pytorch/fsdp's (read by :class:`trainstack_train.tokens.TokenFile`, with its checks), and
the windows a step and a process take are the ones pytorch/fsdp's ranks take: sample ``(step * world + rank) *
batch + j`` modulo the number of windows. The synthetic rows follow pytorch/fsdp's idea (each row walks a
fixed random permutation of 256 ids from a random start, a bigram the model learns in a few dozen steps) with
numpy's generator instead of torch's, so they differ from pytorch/fsdp's rows but are as deterministic: a
function of ``(seed, step, rank)``, which is what lets a resumed run continue on the uninterrupted data.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from trainstack_train.tokens import TokenFile


class Rows:
    """``[batch, seq_len + 1]`` int32 token rows of one process for a step (inputs plus shifted targets)."""

    def __init__(
        self, data: str, vocab_size: int, batch_size: int, seq_len: int, rank: int, world: int, seed: int
    ) -> None:
        self.batch_size, self.seq_len = batch_size, seq_len
        self.rank, self.world, self.seed = rank, world, seed
        self.file: TokenFile | None = None
        self.orbits: np.ndarray | None = None
        if data == "synthetic":
            vocab = min(vocab_size, 256)
            perm = np.random.default_rng(seed).permutation(vocab)
            orbits = np.empty((vocab, seq_len + 1), dtype=np.int32)
            orbits[:, 0] = np.arange(vocab)
            for t in range(seq_len):
                orbits[:, t + 1] = perm[orbits[:, t]]
            self.orbits = orbits
            return
        self.file = TokenFile.open(Path(data))
        if self.file.vocab_size > vocab_size:
            raise ValueError(
                f"--data vocabulary ({self.file.vocab_size}) exceeds the model's ({vocab_size}); "
                "pick a --config with a larger vocab_size"
            )
        if self.file.tokens.shape[0] < seq_len + 1:
            raise ValueError(f"--data holds {self.file.tokens.shape[0]} tokens, fewer than --seq-len + 1")

    def batch(self, step: int) -> np.ndarray:
        """This process's rows for ``step``."""
        if self.orbits is not None:
            rng = np.random.default_rng((self.seed, step, self.rank))
            return self.orbits[rng.integers(0, self.orbits.shape[0], self.batch_size)]
        assert self.file is not None
        tokens = self.file.tokens
        windows = max(1, (tokens.shape[0] - 1) // self.seq_len)
        first = (step * self.world + self.rank) * self.batch_size
        starts = [((first + j) % windows) * self.seq_len for j in range(self.batch_size)]
        return np.stack([np.asarray(tokens[s : s + self.seq_len + 1], dtype=np.int32) for s in starts])
