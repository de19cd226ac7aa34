"""Megatron-Core's indexed dataset (``.bin`` + ``.idx``, "MMIDIDX" version 1), written and read with numpy.

Why this container: it is what Megatron-LM's ``preprocess_data.py`` writes and what megatron-core's
``IndexedDataset`` reads, so a corpus prepared once feeds ``pytorch/fsdp`` and ``megatron/gpt`` alike, and a
corpus tokenized elsewhere for Megatron trains here without conversion. Torch-free, like
:mod:`trainstack_train.tokens`, so preparation and every framework's reader share it.

Layout of ``PREFIX.idx`` (all little-endian):

* 9 bytes ``b"MMIDIDX\\x00\\x00"``, then the version (``uint64``, always 1) and the token dtype code
  (``uint8``: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16);
* the sequence count ``S`` and the document-index count ``D`` (``uint64`` each);
* ``S`` sequence lengths (``int32``, in tokens), ``S`` sequence pointers (``int64``, byte offsets into
  ``PREFIX.bin``), ``D`` document indices (``int64``: the sequence index at which each document starts,
  beginning with 0 and ending with ``S``, so ``D`` is the number of documents plus one);
* in multimodal datasets only, ``S`` sequence modes (``int8``), which this reader skips.

``PREFIX.bin`` holds the sequences' tokens back to back. We write one sequence per document (as
``preprocess_data.py`` does without sentence splitting), so ``S`` is the number of documents.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

import numpy as np

HEADER = b"MMIDIDX\x00\x00"
VERSION = 1
# The fixed prefix: header, version, dtype code, sequence count, document-index count.
_PREFIX = struct.Struct("<9sQBQQ")
DTYPE_CODES: dict[int, np.dtype] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.float64),
    7: np.dtype(np.float32),
    8: np.dtype(np.uint16),
}
_CODE_OF = {dtype: code for code, dtype in DTYPE_CODES.items()}


def token_dtype(vocab_size: int) -> np.dtype:
    """``uint16`` below 65,500 ids, else ``int32``: megatron-core's own rule, so our files match its."""
    return np.dtype(np.uint16) if vocab_size < 65500 else np.dtype(np.int32)


def paths(prefix: Path) -> tuple[Path, Path]:
    """``(PREFIX.bin, PREFIX.idx)``: the suffix is appended, as megatron-core does, never substituted."""
    return prefix.with_name(prefix.name + ".bin"), prefix.with_name(prefix.name + ".idx")


class IndexedWriter:
    """Streams documents into ``PREFIX.bin`` and writes ``PREFIX.idx`` on :meth:`close`.

    Only the lengths stay in memory (8 bytes a document), so a shard of any size is written in one pass.
    """

    def __init__(self, prefix: Path, dtype: np.dtype) -> None:
        if np.dtype(dtype) not in _CODE_OF or np.dtype(dtype).kind not in "iu":
            raise ValueError(f"{prefix}: dtype {dtype} is not an integer dtype of the indexed format")
        self.prefix = prefix
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.bin_path, self.idx_path = paths(prefix)
        self._bin: BinaryIO = self.bin_path.open("wb")
        self._lengths = array("q")  # 8 bytes a document, not a Python int's 28
        self.tokens = 0

    def add_document(self, ids: Iterable[int] | np.ndarray) -> None:
        """One document as one sequence; ids outside the dtype's range are refused, not wrapped."""
        array = np.asarray(ids)
        if array.size and (array.min() < 0 or array.max() > np.iinfo(self.dtype).max):
            raise ValueError(f"{self.prefix}: token id outside {self.dtype.name}")
        self._bin.write(array.astype(self.dtype, copy=False).tobytes())
        self._lengths.append(int(array.size))
        self.tokens += int(array.size)

    def close(self) -> None:
        """Finish ``.bin`` and write ``.idx`` (lengths, byte pointers, document indices)."""
        self._bin.close()
        lengths = np.frombuffer(self._lengths, dtype=np.int64).astype("<i4")
        pointers = np.zeros(lengths.size, dtype="<i8")
        if lengths.size:
            np.cumsum(lengths[:-1].astype("<i8") * self.dtype.itemsize, out=pointers[1:])
        documents = np.arange(lengths.size + 1, dtype="<i8")
        code = _CODE_OF[np.dtype(self.dtype.newbyteorder("="))]
        with self.idx_path.open("wb") as sink:
            sink.write(_PREFIX.pack(HEADER, VERSION, code, lengths.size, documents.size))
            for part in (lengths, pointers, documents):
                sink.write(part.tobytes())

    def __enter__(self) -> IndexedWriter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is None:
            self.close()
        else:
            self._bin.close()


@dataclass(frozen=True)
class IndexedDataset:
    """Memory-mapped view of one ``PREFIX.bin``/``PREFIX.idx`` pair, checked before it is trusted."""

    prefix: Path
    dtype: np.dtype
    sequence_lengths: np.ndarray
    sequence_pointers: np.ndarray
    document_indices: np.ndarray
    tokens: np.ndarray

    @classmethod
    def open(cls, prefix: Path) -> IndexedDataset:
        """Every size in the header is checked against both files, so a truncated copy fails here by name."""
        bin_path, idx_path = paths(prefix)
        for path in (bin_path, idx_path):
            if not path.is_file():
                raise FileNotFoundError(f"{path}: missing (an indexed dataset is a .bin and an .idx)")
        raw = np.memmap(idx_path, dtype=np.uint8, mode="r")
        if raw.size < _PREFIX.size:
            raise ValueError(f"{idx_path}: {raw.size} bytes, shorter than the {_PREFIX.size}-byte header")
        header, version, code, count, doc_count = _PREFIX.unpack(raw[: _PREFIX.size].tobytes())
        if header != HEADER:
            raise ValueError(f"{idx_path}: header {header!r} is not {HEADER!r} (not an indexed dataset)")
        if version != VERSION:
            raise ValueError(f"{idx_path}: version {version}, this reader knows version {VERSION}")
        if code not in DTYPE_CODES:
            raise ValueError(f"{idx_path}: unknown dtype code {code}")
        dtype = DTYPE_CODES[code].newbyteorder("<")
        body = _PREFIX.size + 12 * count + 8 * doc_count
        if raw.size not in (body, body + count):  # + count: the int8 modes of a multimodal dataset
            raise ValueError(f"{idx_path}: {raw.size} bytes, the header's counts need {body}")
        at = _PREFIX.size
        lengths = raw[at : at + 4 * count].view("<i4")
        pointers = raw[at + 4 * count : at + 12 * count].view("<i8")
        documents = raw[at + 12 * count : body].view("<i8")
        held = bin_path.stat().st_size
        needed = int(lengths.sum(dtype=np.int64)) * dtype.itemsize
        if held != needed:
            raise ValueError(f"{bin_path}: {held} bytes, the index's sequence lengths need {needed}")
        if doc_count == 0 or documents[0] != 0 or documents[-1] != count:
            raise ValueError(f"{idx_path}: document indices do not run from 0 to the sequence count")
        tokens = np.memmap(bin_path, dtype=dtype, mode="r") if held else np.zeros(0, dtype=dtype)
        return cls(prefix, dtype, lengths, pointers, documents, tokens)

    def __len__(self) -> int:
        """The number of sequences (documents, for files we write)."""
        return int(self.sequence_lengths.size)

    @property
    def num_documents(self) -> int:
        """Documents, from the document indices (one fewer than their count)."""
        return int(self.document_indices.size) - 1

    @property
    def num_tokens(self) -> int:
        """All tokens of the ``.bin``."""
        return int(self.tokens.size)

    def sequence(self, index: int) -> np.ndarray:
        """Sequence ``index``'s tokens (a view of the memory map)."""
        start = int(self.sequence_pointers[index]) // self.dtype.itemsize
        return self.tokens[start : start + int(self.sequence_lengths[index])]
