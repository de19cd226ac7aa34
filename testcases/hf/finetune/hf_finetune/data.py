"""Instruction records as packed token windows: the tokenizer, the held-out split, per-step batches.

Records are JSON lines with ``instruction``, ``output`` and an optional ``input``. Each becomes the Alpaca
prompt (``### Instruction:`` / ``### Input:`` / ``### Response:``) followed by the output and EOS, with BOS
in front; only the output and EOS are trained on (the prompt's labels are -100, which the loss skips).

Training packs the training records, in an order fixed by the seed, into one stream, and row ``k`` is the
``seq_len`` tokens from ``k * seq_len`` on, wrapping around the stream: step ``s`` on rank ``r`` takes rows
``(s * world + r) * batch .. + batch - 1``, so a batch is a pure function of the step and a resumed run sees
what an uninterrupted one would have. Packing keeps every position a real token (the step's tokens are
``batch x seq_len`` as in ``pytorch/fsdp``); a window may span two records, as in most packed fine-tuning.
The held-out records are packed in order into windows of their own, the last one padded (labels -100).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from .config import TOKENIZER_FILES

IGNORE = -100
PROMPT = "### Instruction:\n{instruction}\n\n"
INPUT = "### Input:\n{input}\n\n"
RESPONSE = "### Response:\n"


@dataclass(frozen=True)
class Record:
    """One instruction example."""

    instruction: str
    input: str
    output: str

    def prompt(self) -> str:
        """The text the model is conditioned on (not trained on)."""
        text = PROMPT.format(instruction=self.instruction)
        if self.input:
            text += INPUT.format(input=self.input)
        return text + RESPONSE


class Tokenizer(Protocol):
    """What the packing needs of a tokenizer."""

    name: str
    bos_id: int | None
    eos_id: int

    def encode(self, text: str) -> list[int]:
        """Ids of the text, without special tokens."""


class ByteLevel:
    """The fallback when the model directory has no tokenizer: pytorch/fsdp's bytes, BOS 256, EOS 257."""

    name = "byte-level"
    bos_id: int | None = 256
    eos_id = 257

    def encode(self, text: str) -> list[int]:
        """UTF-8 bytes; nothing to download and lossless for any text."""
        return list(text.encode("utf-8"))


class ModelTokenizer:
    """The tokenizer saved with the model (``tokenizer.json``), loaded by transformers from the directory."""

    name = "model"

    def __init__(self, path: Path) -> None:
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        if self.tok.eos_token_id is None:
            raise ValueError(
                f"--model-path {str(path)!r}: its tokenizer has no EOS token to end a record with"
            )
        self.bos_id = self.tok.bos_token_id
        self.eos_id = int(self.tok.eos_token_id)

    def encode(self, text: str) -> list[int]:
        """The tokenizer's ids, special tokens added by the packing, not here."""
        return list(self.tok.encode(text, add_special_tokens=False))


def load_tokenizer(model_path: str) -> Tokenizer:
    """The model directory's tokenizer when it has one, else the byte-level fallback."""
    path = Path(model_path) if model_path else None
    if path is not None and any((path / name).is_file() for name in TOKENIZER_FILES):
        return ModelTokenizer(path)
    return ByteLevel()


def load_records(path: Path) -> list[Record]:
    """Every line of a JSONL file as a record; a bad line is named by file and line number."""
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            body = json.loads(line)
            fields = [body.get(key, "") for key in ("instruction", "input", "output")]
        except (ValueError, AttributeError) as err:
            raise ValueError(f"{path}:{number}: not a JSON object ({err})") from err
        if not all(isinstance(value, str) for value in fields) or not fields[0] or not fields[2]:
            raise ValueError(f"{path}:{number}: needs string fields instruction and output (input optional)")
        records.append(Record(*fields))
    if len(records) < 2:
        raise ValueError(f"{path}: {len(records)} record(s); a training and a held-out split need at least 2")
    return records


def split(records: list[Record], fraction: float) -> tuple[list[Record], list[Record]]:
    """Training and held-out records: every ``1/fraction``-th one is held out, independent of the seed."""
    count = len(records)
    held = min(count - 1, max(1, round(count * fraction)))
    picked = {int((i + 0.5) * count / held) for i in range(held)}
    train = [r for i, r in enumerate(records) if i not in picked]
    return train, [r for i, r in enumerate(records) if i in picked]


def encode(record: Record, tok: Tokenizer) -> tuple[list[int], list[int]]:
    """Ids and labels of one record: BOS and prompt masked, output and EOS trained on."""
    head = ([tok.bos_id] if tok.bos_id is not None else []) + tok.encode(record.prompt())
    tail = [*tok.encode(record.output), tok.eos_id]
    return head + tail, [IGNORE] * len(head) + tail


@dataclass
class Stream:
    """Records' ids and labels end to end."""

    ids: np.ndarray
    labels: np.ndarray

    @classmethod
    def pack(cls, records: list[Record], tok: Tokenizer, order: np.ndarray | None = None) -> Stream:
        """Concatenate the records (in ``order`` if given)."""
        chosen = [records[int(i)] for i in order] if order is not None else records
        pairs = [encode(record, tok) for record in chosen]
        ids = np.fromiter((t for pair in pairs for t in pair[0]), dtype=np.int64)
        labels = np.fromiter((t for pair in pairs for t in pair[1]), dtype=np.int64)
        return cls(ids, labels)


class Batches:
    """Training rows as a function of (step, rank); see the module docstring."""

    def __init__(self, stream: Stream, batch_size: int, seq_len: int, world: int) -> None:
        self.stream = stream
        self.batch_size = batch_size
        self.seq_len = seq_len
        self.world = world

    def rows(self, step: int, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """``[batch, seq_len]`` ids and labels of one rank's share of a step."""
        first = (step * self.world + rank) * self.batch_size
        starts = (np.arange(first, first + self.batch_size) * self.seq_len)[:, None]
        index = (starts + np.arange(self.seq_len)[None, :]) % self.stream.ids.shape[0]
        return self.stream.ids[index], self.stream.labels[index]

    def targets(self, step: int) -> int:
        """Labels the loss counts in the whole step, every rank's rows (the model shifts: position 0 is none).

        Known on every rank without communication, so each rank divides its summed loss by the same count
        and the ranks' averaged gradients are those of the step's mean over all its trained tokens.
        """
        return sum(int((self.rows(step, r)[1][:, 1:] != IGNORE).sum()) for r in range(self.world))


def eval_windows(stream: Stream, seq_len: int, pad_id: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The held-out stream cut into ``seq_len`` windows, the last padded with ``pad_id`` (labels -100)."""
    windows = []
    for start in range(0, stream.ids.shape[0], seq_len):
        ids = np.full(seq_len, pad_id, dtype=np.int64)
        labels = np.full(seq_len, IGNORE, dtype=np.int64)
        part = slice(start, start + seq_len)
        length = stream.ids[part].shape[0]
        ids[:length], labels[:length] = stream.ids[part], stream.labels[part]
        windows.append((ids, labels))
    return windows


def vocab_check(streams: list[Stream], vocab_size: int) -> None:
    """Refuse ids the model's embedding has no row for (a tokenizer larger than the model)."""
    largest = max(int(s.ids.max()) for s in streams if s.ids.size)
    if largest >= vocab_size:
        raise ValueError(f"the tokenizer produced id {largest}, beyond the model's vocabulary ({vocab_size})")
