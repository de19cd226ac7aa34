"""Reading a prepared corpus for training: its manifest, its shards, and a sample order that resumes exactly.

Torch-free (numpy only), like :mod:`trainstack_train.tokens`, so every framework's test case can read the
same directory; :mod:`trainstack_train.prepare` writes it (docs/data.md is the reference).

Samples follow Megatron's GPT dataset in what a sample is: the shards' documents, each ending with its EOS,
read as one stream in shard order, and sample ``i`` the ``seq_len + 1`` tokens from ``i * seq_len`` (inputs
and shifted targets, so consecutive samples share one token). It is simpler in the order: documents are
not reshuffled per epoch; instead epoch ``e`` visits every sample once, in the order of a permutation
seeded by ``(seed, e)``. A :class:`Position` (epoch, index into that order) is all a checkpoint needs to
hold for the next batch after a restart to equal the one an uninterrupted run would have read.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .indexed import IndexedDataset

FORMAT = "trainstack-corpus"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


def _manifest(directory: Path) -> tuple[dict[str, Any], str]:
    path = directory / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(
            f"--data {directory}: no {MANIFEST} (prepare it with python -m trainstack_train.prepare shards)"
        )
    raw = path.read_bytes()
    manifest = json.loads(raw)
    if manifest.get("format") != FORMAT or manifest.get("version") != FORMAT_VERSION:
        found = f"{manifest.get('format')!r} version {manifest.get('version')!r}"
        raise ValueError(
            f"--data {directory}: {MANIFEST} is {found}, not {FORMAT!r} version {FORMAT_VERSION}"
        )
    return manifest, hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True)
class Corpus:
    """A prepared directory, its shards opened and checked against the manifest."""

    directory: Path
    manifest: dict[str, Any]
    fingerprint: str
    shards: tuple[IndexedDataset, ...]
    starts: np.ndarray

    @classmethod
    def open(cls, directory: Path) -> Corpus:
        """Counts and dtypes are checked (cheap); sha256 of the shards is preparation's check, not ours."""
        manifest, fingerprint = _manifest(directory)
        shards = []
        for entry in manifest["shards"]:
            shard = IndexedDataset.open(directory / entry["name"])
            held = (shard.num_documents, shard.num_tokens, shard.dtype.name)
            declared = (entry["documents"], entry["tokens"], manifest["dtype"])
            if held != declared:
                raise ValueError(
                    f"--data {directory}: {entry['name']} holds (documents, tokens, dtype) {held}, "
                    f"{MANIFEST} says {declared}"
                )
            shards.append(shard)
        starts = np.zeros(len(shards) + 1, dtype=np.int64)
        np.cumsum([s.num_tokens for s in shards], out=starts[1:])
        return cls(directory, manifest, fingerprint, tuple(shards), starts)

    @property
    def vocab_size(self) -> int:
        """The tokenizer's vocabulary, special tokens included."""
        return int(self.manifest["tokenizer"]["vocab_size"])

    @property
    def num_tokens(self) -> int:
        """Tokens of all shards."""
        return int(self.starts[-1])

    def read(self, start: int, count: int) -> np.ndarray:
        """``count`` tokens of the stream from ``start``, as int64, across shard boundaries if need be."""
        out = np.empty(count, dtype=np.int64)
        done = 0
        shard = int(np.searchsorted(self.starts, start, side="right")) - 1
        while done < count:
            offset = start + done - int(self.starts[shard])
            piece = self.shards[shard].tokens[offset : offset + count - done]
            out[done : done + piece.size] = piece
            done += piece.size
            shard += 1
        return out


@dataclass(frozen=True)
class Position:
    """Where the sampler stands: the epoch, and the next index into that epoch's sample order."""

    epoch: int = 0
    index: int = 0


class Sampler:
    """Fixed-length samples of a :class:`Corpus` in a seeded order, with a position to save and restore.

    The position counts samples of the whole job (all ranks), so every rank holds the same one and rank 0
    alone saves it; a restart with another world size continues from the same sample.
    """

    def __init__(self, corpus: Corpus, seq_len: int, seed: int) -> None:
        self.corpus = corpus
        self.seq_len = seq_len
        self.seed = seed
        self.num_samples = (corpus.num_tokens - 1) // seq_len
        if self.num_samples < 1:
            raise ValueError(
                f"--data {corpus.directory}: {corpus.num_tokens} tokens, "
                f"fewer than --seq-len + 1 ({seq_len + 1})"
            )
        self.position = Position()
        self._order: tuple[int, np.ndarray] | None = None

    def order(self, epoch: int) -> np.ndarray:
        """Epoch ``epoch``'s permutation of the sample ids (uint32: 4 bytes a sample; one epoch cached)."""
        if self._order is None or self._order[0] != epoch:
            ids = np.arange(self.num_samples, dtype=np.uint32 if self.num_samples < 2**32 else np.uint64)
            np.random.default_rng([self.seed, epoch]).shuffle(ids)
            self._order = (epoch, ids)
        return self._order[1]

    def take(self, count: int) -> np.ndarray:
        """The next ``count`` sample ids, crossing into the next epoch's order when one runs out."""
        taken: list[np.ndarray] = []
        epoch, index = self.position.epoch, self.position.index
        while count > 0:
            chunk = self.order(epoch)[index : index + count]
            taken.append(chunk)
            count -= chunk.size
            index += chunk.size
            if index == self.num_samples:
                epoch, index = epoch + 1, 0
        self.position = Position(epoch, index)
        return np.concatenate(taken).astype(np.int64)

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """``[len(ids), seq_len + 1]`` int64 tokens of the given samples."""
        return np.stack([self.corpus.read(int(i) * self.seq_len, self.seq_len + 1) for i in ids])

    def next_batch(self, rank: int, world: int, batch_size: int) -> np.ndarray:
        """Rank ``rank``'s rows of the next global batch (``world * batch_size`` samples, ranks in order)."""
        ids = self.take(world * batch_size)
        return self.rows(ids[rank * batch_size : (rank + 1) * batch_size])

    def seek(self, consumed: int) -> None:
        """Stand after ``consumed`` samples of the job: the position a run starting there would have."""
        self.position = Position(*divmod(consumed, self.num_samples))

    def state(self) -> dict[str, Any]:
        """JSON-able position plus what it is only valid for (corpus, seed, sequence length)."""
        return {
            "epoch": self.position.epoch,
            "index": self.position.index,
            "seed": self.seed,
            "seq_len": self.seq_len,
            "corpus": self.corpus.fingerprint,
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Take a saved position, refusing one saved for another corpus, seed or sequence length."""
        mine = self.state()
        differs = [key for key in ("corpus", "seed", "seq_len") if state.get(key) != mine[key]]
        if differs:
            raise ValueError(
                f"the checkpoint's data position was saved with another {', '.join(differs)} "
                f"({', '.join(f'{k}={state.get(k)!r}' for k in differs)}); resume with the same --data, "
                "--seed and --seq-len, or start a new --checkpoint-dir"
            )
        epoch, index = int(state["epoch"]), int(state["index"])
        if not (epoch >= 0 and 0 <= index < self.num_samples):
            raise ValueError(f"the checkpoint's data position ({epoch}, {index}) is outside this corpus")
        self.position = Position(epoch, index)
