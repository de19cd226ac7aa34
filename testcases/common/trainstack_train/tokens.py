"""The on-disk token format (``trainstack-tokens-v1``): the byte-level tokenizer, ``prepare`` and the reader.

Kept apart from :mod:`trainstack_train.data` (the per-step batches as torch tensors) and free of torch, so
test cases of other frameworks (``jax/llama``) read the same files with the same checks. The format is
described in :mod:`trainstack_train.data`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FORMAT = "trainstack-tokens-v1"


class ByteTokenizer:
    """UTF-8 bytes as ids 0-255, BOS=256, EOS=257: nothing to download, lossless for any text."""

    bos_id = 256
    eos_id = 257
    vocab_size = 258

    def encode(self, text: str) -> list[int]:
        """Bytes of the UTF-8 encoding."""
        return list(text.encode("utf-8"))

    def decode(self, ids: Iterable[int]) -> str:
        """Inverse of :meth:`encode`; special ids are dropped."""
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


def _dtype_for(vocab_size: int) -> np.dtype:
    return np.dtype("<u2") if vocab_size <= 2**16 else np.dtype("<u4")


def prepare(sources: list[Path], output: Path, tokenizer: ByteTokenizer | None = None) -> dict[str, object]:
    """Tokenize text files (one document each) into ``output`` in the format above; returns ``meta.json``."""
    tok = tokenizer or ByteTokenizer()
    missing = [str(p) for p in sources if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"prepare: input file(s) not found: {', '.join(missing)}")
    dtype = _dtype_for(tok.vocab_size)
    output.mkdir(parents=True, exist_ok=True)
    total = 0
    with (output / "tokens.bin").open("wb") as sink:
        for path in sources:
            ids = [*tok.encode(path.read_text(encoding="utf-8")), tok.eos_id]
            sink.write(np.asarray(ids, dtype=dtype).tobytes())
            total += len(ids)
    meta: dict[str, object] = {
        "format": FORMAT,
        "dtype": dtype.name,
        "num_tokens": total,
        "vocab_size": tok.vocab_size,
        "tokenizer": "byte",
        "bos_id": tok.bos_id,
        "eos_id": tok.eos_id,
        "documents": len(sources),
        "sources": [p.name for p in sources],
    }
    (output / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return meta


@dataclass
class TokenFile:
    """Memory-mapped view of a prepared directory."""

    tokens: np.memmap
    vocab_size: int

    @classmethod
    def open(cls, directory: Path) -> TokenFile:
        """Validate ``meta.json`` against the file size before trusting either."""
        meta_path = directory / "meta.json"
        if not meta_path.is_file():
            raise FileNotFoundError(f"--data {directory}: no meta.json (run prepare_data.py first)")
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("format") != FORMAT:
            raise ValueError(f"--data {directory}: format {meta.get('format')!r} is not {FORMAT!r}")
        tokens = np.memmap(directory / "tokens.bin", dtype=np.dtype(meta["dtype"]), mode="r")
        if tokens.shape[0] != meta["num_tokens"]:
            held, declared = tokens.shape[0], meta["num_tokens"]
            raise ValueError(f"--data {directory}: tokens.bin holds {held} ids, meta.json says {declared}")
        return cls(tokens=tokens, vocab_size=int(meta["vocab_size"]))
