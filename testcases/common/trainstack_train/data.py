"""Token data: a byte-level tokenizer, the on-disk token format, and per-step batches.

Format (``trainstack-tokens-v1``), one directory:

* ``tokens.bin``: every document's token ids, concatenated, each document followed by EOS; little-endian
  ``uint16`` when the vocabulary fits in 16 bits, else ``uint32``. Read with ``numpy.memmap``, so a
  multi-gigabyte corpus costs no RAM and every rank can open the same file on a shared filesystem.
* ``meta.json``: ``{"format", "dtype", "num_tokens", "vocab_size", "tokenizer", "bos_id", "eos_id",
  "documents", "sources"}``.

Batches are a pure function of ``(step, rank)``: sample ``i`` is the window ``[i*seq_len, i*seq_len+seq_len]``
(``seq_len + 1`` tokens: inputs plus shifted targets), and step ``s`` on rank ``r`` takes samples
``(s*world + r)*batch ... + batch - 1`` modulo the number of windows. A resumed run therefore needs only the
step number to continue on exactly the data an uninterrupted run would have seen.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .tokens import FORMAT, ByteTokenizer, TokenFile, prepare

# The token format lives in the torch-free trainstack_train.tokens; its names stay importable from here.
__all__ = ["FORMAT", "BatchSource", "ByteTokenizer", "TokenFile", "prepare"]


class BatchSource:
    """Yields ``(inputs, targets)`` for a step; deterministic in ``(seed, step, rank)`` for resumability."""

    def __init__(
        self, data: str, vocab_size: int, batch_size: int, seq_len: int, rank: int, world: int, seed: int
    ) -> None:
        self.batch_size = batch_size
        self.seq_len = seq_len
        self.rank = rank
        self.world = world
        self.seed = seed
        self.vocab_size = vocab_size
        self.file: TokenFile | None = None
        self._orbits: torch.Tensor | None = None
        if data != "synthetic":
            self.file = TokenFile.open(Path(data))
            if self.file.vocab_size > vocab_size:
                raise ValueError(
                    f"--data vocabulary ({self.file.vocab_size}) exceeds the model's ({vocab_size}); "
                    "pick a --config with a larger vocab_size"
                )
            if self.file.tokens.shape[0] < seq_len + 1:
                raise ValueError(f"--data holds {self.file.tokens.shape[0]} tokens, fewer than --seq-len + 1")

    def _synthetic(self, step: int) -> torch.Tensor:
        """Learnable synthetic text: each row walks a fixed random permutation from a random start.

        Uniform random tokens cannot be learnt, so a loss curve on them says nothing; a permutation walk is
        a deterministic bigram any model picks up in a few dozen steps, and the same step and rank always
        give the same rows. Ids stay below 256, so every configuration's vocabulary holds them.
        """
        if self._orbits is None:
            vocab = min(self.vocab_size, 256)
            perm = torch.randperm(vocab, generator=torch.Generator().manual_seed(self.seed))
            orbits = torch.empty(vocab, self.seq_len + 1, dtype=torch.long)
            orbits[:, 0] = torch.arange(vocab)
            for t in range(self.seq_len):
                orbits[:, t + 1] = perm[orbits[:, t]]
            self._orbits = orbits
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + step * 1009 + self.rank)
        starts = torch.randint(0, self._orbits.shape[0], (self.batch_size,), generator=gen)
        return self._orbits[starts]

    def _from_file(self, step: int) -> torch.Tensor:
        assert self.file is not None
        tokens = self.file.tokens
        windows = max(1, (tokens.shape[0] - 1) // self.seq_len)
        first = (step * self.world + self.rank) * self.batch_size
        rows = []
        for j in range(self.batch_size):
            start = ((first + j) % windows) * self.seq_len
            rows.append(np.asarray(tokens[start : start + self.seq_len + 1], dtype=np.int64))
        return torch.from_numpy(np.stack(rows))

    def batch(self, step: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and next-token targets, already on ``device``."""
        rows = self._synthetic(step) if self.file is None else self._from_file(step)
        if device.type == "cuda":
            # From pinned memory the copy is queued like a kernel; CUDA may make a copy from pageable memory
            # synchronous for the host, which would hold up the queueing of the rest of the step.
            rows = rows.pin_memory()
        rows = rows.to(device, non_blocking=True)
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
