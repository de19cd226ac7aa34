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

A directory holding a ``manifest.json`` is a prepared corpus (``trainstack-corpus``: shards in Megatron's
indexed format, see :mod:`trainstack_train.corpus`). It is read in order, one step after the other, in a
seeded shuffled order of samples; its position is what :meth:`BatchSource.state` hands to the checkpoint and
:meth:`BatchSource.resume` takes back. :class:`ReaderPosition` carries it through the checkpoints of the cases
that save with their framework's own checkpointer (torchtitan's, DeepSpeed's, megatron/gpt's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from .corpus import MANIFEST, Corpus, Sampler
from .tokens import FORMAT, ByteTokenizer, TokenFile, prepare

# The token format lives in the torch-free trainstack_train.tokens; its names stay importable from here.
__all__ = ["FORMAT", "BatchSource", "ByteTokenizer", "ReaderPosition", "Stateful", "TokenFile", "prepare"]


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
        self.sampler: Sampler | None = None
        self.next_step = 0
        self._orbits: torch.Tensor | None = None
        if data == "synthetic":
            return
        if (Path(data) / MANIFEST).is_file():
            corpus = Corpus.open(Path(data))
            self._check_vocabulary(corpus.vocab_size)
            self.sampler = Sampler(corpus, seq_len, seed)
            return
        self.file = TokenFile.open(Path(data))
        self._check_vocabulary(self.file.vocab_size)
        if self.file.tokens.shape[0] < seq_len + 1:
            raise ValueError(f"--data holds {self.file.tokens.shape[0]} tokens, fewer than --seq-len + 1")

    def _check_vocabulary(self, held: int) -> None:
        if held > self.vocab_size:
            raise ValueError(
                f"--data vocabulary ({held}) exceeds the model's ({self.vocab_size}); "
                "pick a --config with a larger vocab_size"
            )

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

    def _from_corpus(self, step: int) -> torch.Tensor:
        """The next batch of the corpus's order; asked out of order it fails rather than read other rows."""
        assert self.sampler is not None
        if step != self.next_step:
            raise RuntimeError(
                f"--data {self.sampler.corpus.directory}: step {step} asked, the reader stands at step "
                f"{self.next_step} (a prepared corpus is read in order; a restart goes through resume())"
            )
        self.next_step += 1
        return torch.from_numpy(self.sampler.next_batch(self.rank, self.world, self.batch_size))

    def state(self) -> dict[str, Any] | None:
        """What a checkpoint saves to continue on the same rows: the corpus reader's position, else None.

        Synthetic data and ``trainstack-tokens-v1`` files are functions of the step, which the checkpoint
        holds already.
        """
        if self.sampler is None:
            return None
        return {"step": self.next_step, **self.sampler.state()}

    def resume(self, step: int, state: dict[str, Any] | None) -> None:
        """Continue at ``step``: from the saved position, or, when the checkpoint holds none (it was saved
        by a run on other data), after the ``step * world * batch_size`` samples those steps would read.
        """
        if self.sampler is None:
            return
        if state is None:
            self.sampler.seek(step * self.world * self.batch_size)
        elif state.get("step") != step:
            raise ValueError(
                f"the checkpoint of step {step} holds a data position of step {state.get('step')}"
            )
        else:
            self.sampler.restore(state)
        self.next_step = step

    def batch(self, step: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and next-token targets, already on ``device``."""
        if self.sampler is not None:
            rows = self._from_corpus(step)
        else:
            rows = self._synthetic(step) if self.file is None else self._from_file(step)
        if device.type == "cuda":
            # From pinned memory the copy is queued like a kernel; CUDA may make a copy from pageable memory
            # synchronous for the host, which would hold up the queueing of the rest of the step.
            rows = rows.pin_memory()
        rows = rows.to(device, non_blocking=True)
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()


class Stateful(Protocol):
    """Anything with torch's ``state_dict``/``load_state_dict`` pair: what the cases' own checkpoint modules
    (megatron/gpt's file per rank, DeepSpeed's client state) save and load, :class:`ReaderPosition` among it.
    """

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state_dict: Any) -> Any: ...


class ReaderPosition:
    """The reader's position as a stateful object (``state_dict``/``load_state_dict``), for a framework's own
    checkpointer: torchtitan's (DCP), DeepSpeed's client state, megatron/gpt's file per rank.

    Why a separate object: those checkpointers load before the :class:`BatchSource` exists (it needs the
    data-parallel coordinates of the built model), so the loaded position is held until :meth:`attach`
    hands it to the source at the resumed step; a save asks the attached source then. The position travels
    as one JSON string: every checkpointer stores a string as it is (DCP as a replicated byte item), the same
    on every rank, and ``null`` for data that needs none (synthetic, ``trainstack-tokens-v1``).
    """

    def __init__(self) -> None:
        self.source: BatchSource | None = None
        self.loaded: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        """``{"position": JSON}``: the attached source's position now (``null`` before one is attached)."""
        return {"position": json.dumps(None if self.source is None else self.source.state(), sort_keys=True)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Keep a checkpoint's position for :meth:`attach`."""
        loaded = json.loads(state_dict["position"])
        self.loaded = loaded if isinstance(loaded, dict) else None

    def attach(self, source: BatchSource, step: int) -> None:
        """Continue ``source`` at ``step`` from the loaded position (or, with none, after the samples those
        steps read: :meth:`BatchSource.resume`), and save its position from now on."""
        source.resume(step, self.loaded)
        self.source = source
