"""Preparing a corpus: text files in, tokenized shards (Megatron indexed datasets) and a manifest out.

Why shards and a manifest: a corpus too large for one process is tokenized by several (ranks of a job, or
tasks of an array), each writing its own shards; training then checks one ``manifest.json`` rather than
trusting whatever files lie in the directory. Document ``i`` of the corpus (files in sorted order, then
their lines, rows or whole text) goes to shard ``i mod num_shards``, a rule that does not depend on how many
processes share the work, so any split of the shards among workers writes the same bytes. The objects under
an ``s3://bucket/prefix`` are read in the order the same files on disk would be, so both give one set of
shards.

Each shard is written under a ``.partial`` name and renamed when complete, then its entry
(``shard-NNNNN.json``: documents, tokens, sha256 of ``.bin`` and ``.idx``) is written; a rerun skips a
shard whose files match its entry and redoes any other, so a killed preparation resumes where it stopped.
The process that finds every entry present writes ``manifest.json``.

Needs the ``tokenizers`` package (Hugging Face), for Parquet input ``pyarrow``, and for S3 input the
``s3torchconnector`` client that S3 checkpoints use (:mod:`.storage`); all are imported only here, so the
training side (:mod:`trainstack_train.corpus`) stays numpy-only. Run as ``python -m trainstack_train.prepare``
(see ``--help``); docs/data.md is the reference.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.util
import io
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path, PurePosixPath
from typing import IO, Any

from .corpus import FORMAT, FORMAT_VERSION, MANIFEST
from .indexed import IndexedDataset, IndexedWriter, paths, token_dtype
from .storage import connect_s3, is_s3, parse_s3_uri, s3_objects, s3_problem

TOKENIZER_FILE = "tokenizer.json"
# Tried in this order when --eos-token is not given: GPT-2/Llama-3 style, then SentencePiece style.
EOS_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>")
SUFFIXES = (".jsonl", ".jsonl.gz", ".txt", ".txt.gz", ".parquet")
BATCH_DOCUMENTS = 1024
# Bytes read from an S3 object at a time (the connector streams the object's parts behind it).
READ_BUFFER = 1 << 20


class PrepareError(ValueError):
    """Bad input, refused before anything is written; the message names the input."""


@dataclass(frozen=True)
class Plan:
    """What a shard's bytes depend on: a shard written under another plan is never mixed into this one."""

    tokenizer_sha256: str
    vocab_size: int
    eos_id: int
    dtype: str
    num_shards: int
    text_field: str
    corpus_sha256: str

    def as_dict(self) -> dict[str, Any]:
        """JSON form, as stored in every shard entry and in the manifest."""
        return {
            "tokenizer_sha256": self.tokenizer_sha256,
            "vocab_size": self.vocab_size,
            "eos_id": self.eos_id,
            "dtype": self.dtype,
            "num_shards": self.num_shards,
            "text_field": self.text_field,
            "corpus_sha256": self.corpus_sha256,
        }


@dataclass
class Outcome:
    """What one invocation did, for the CLI's summary line and the tests."""

    written: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    documents: int = 0
    tokens: int = 0
    seconds: float = 0.0
    manifest: dict[str, Any] | None = None
    plan: Plan | None = None
    source: dict[str, Any] | None = None


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks (shards can be gigabytes)."""
    with path.open("rb") as stream:
        return hashlib.file_digest(stream, "sha256").hexdigest()


def _kind(name: str) -> str | None:
    lower = name.lower()
    return next((suffix for suffix in SUFFIXES if lower.endswith(suffix)), None)


@dataclass(frozen=True)
class Source:
    """One input, a file or an S3 object: where it is (``where``: a path or an ``s3://`` URI, for messages),
    its name in the corpus (``label``: relative to the directory or prefix given, or its file name), its
    size, its ETag (S3 only), and how to open it as bytes (``ranged``: random access, for Parquet)."""

    where: str
    label: str
    size: int
    opener: Callable[[bool], IO[bytes]] = field(compare=False, repr=False)
    etag: str = ""

    def open(self, ranged: bool = False) -> IO[bytes]:
        """A binary stream of the input; the caller closes it."""
        return self.opener(ranged)


def _hidden(label: str) -> bool:
    return any(part.startswith(".") for part in PurePosixPath(label).parts)


def _order(source: Source) -> tuple[str, ...]:
    """Sorted by path segments, not by the whole string (``a/b`` before ``a-c``): the order of the same
    files on disk, so a prefix and its copy on the shared filesystem number their documents alike."""
    return PurePosixPath(source.label).parts


def _open_file(path: Path, _ranged: bool) -> IO[bytes]:
    return path.open("rb")


def _local_sources(given: Path) -> list[Source]:
    def source(path: Path, label: str) -> Source:
        return Source(str(path), label, path.stat().st_size, partial(_open_file, path))

    if given.is_dir():
        inside = [p.relative_to(given).as_posix() for p in given.rglob("*") if p.is_file()]
        found = [source(given / label, label) for label in inside if not _hidden(label)]
        return sorted(found, key=_order)
    if given.is_file():
        return [source(given, given.name)]
    raise PrepareError(f"input {given}: no such file or directory")


def _open_object(client: Any, bucket: str, info: Any, ranged: bool) -> IO[bytes]:
    from s3torchconnector import S3ReaderConstructor

    # Parquet reads its footer first and then the columns it needs: ranged reads fetch only those. Other
    # formats are read from start to end, which the default (sequential) reader streams.
    if ranged:
        return client.get_object(
            bucket, info.key, object_info=info, reader_constructor=S3ReaderConstructor.range_based()
        )
    reader = client.get_object(
        bucket, info.key, object_info=info, reader_constructor=S3ReaderConstructor.sequential()
    )
    # The connector's reader has no read1, which a text wrapper reads with: a buffer in front provides it.
    return io.BufferedReader(reader, buffer_size=READ_BUFFER)


def _s3_sources(uri: str, environ: Mapping[str, str]) -> list[Source]:
    """The objects under ``s3://bucket/prefix`` (the prefix as a directory: ``prefix/...``), or the one
    object named by the URI; refused by name when the URI, the package, the region, the bucket or the
    objects are missing. One listing: the objects' keys, sizes and ETags."""
    problem = s3_problem(uri, environ)
    if problem is not None:
        raise PrepareError(f"input {problem}")
    from s3torchconnector import S3Exception

    place = parse_s3_uri(uri)
    client = connect_s3(environ).client
    under = f"{place.prefix}/" if place.prefix else ""
    try:
        infos = s3_objects(client, place.bucket, under)
        if not infos and place.prefix:
            infos = [i for i in s3_objects(client, place.bucket, place.prefix) if i.key == place.prefix]
            under = place.prefix.rpartition("/")[0] + "/" if "/" in place.prefix else ""
    except S3Exception as err:
        raise PrepareError(f"input {place.uri}: cannot list the bucket: {err}") from None
    found = [
        Source(
            f"s3://{place.bucket}/{info.key}",
            info.key[len(under) :],
            int(info.size),
            partial(_open_object, client, place.bucket, info),
            info.etag,
        )
        for info in infos
        if not info.key.endswith("/") and not _hidden(info.key[len(under) :])
    ]
    if not found:
        raise PrepareError(f"input {place.uri}: no objects under this prefix")
    return sorted(found, key=_order)


def corpus_files(inputs: Sequence[Path | str], environ: Mapping[str, str] | None = None) -> list[Source]:
    """Files of ``inputs`` (files, directories searched recursively, ``s3://`` prefixes), hidden names
    skipped, in order.

    Order is the order given, then sorted paths within a directory or prefix: document numbering, and so
    sharding, must not depend on the filesystem's listing order. ``environ`` holds the AWS variables of an
    ``s3://`` input (region, endpoint); the process's own by default.
    """
    found: list[Source] = []
    for given in inputs:
        if is_s3(str(given)):
            found += _s3_sources(str(given), os.environ if environ is None else environ)
        else:
            found += _local_sources(Path(given))
    unknown = [s.where for s in found if _kind(s.label) is None]
    if unknown:
        raise PrepareError(f"input {unknown[0]}: unknown file type (known: {', '.join(SUFFIXES)})")
    parquet = [s.where for s in found if _kind(s.label) == ".parquet"]
    if parquet and importlib.util.find_spec("pyarrow") is None:
        first = parquet[0]
        raise PrepareError(f"input {first}: reading Parquet needs the pyarrow package, not installed here")
    return found


@contextmanager
def _open_text(source: Source) -> Iterator[IO[str]]:
    with source.open() as raw:
        binary: IO[bytes] = (
            gzip.GzipFile(fileobj=raw, mode="rb") if source.label.lower().endswith(".gz") else raw
        )
        with io.TextIOWrapper(binary, encoding="utf-8") as text:
            yield text


def _jsonl(source: Source, text_field: str) -> Iterator[str]:
    with _open_text(source) as stream:
        for number, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise PrepareError(f"input {source.where}:{number}: not JSON ({err.msg})") from err
            text = record.get(text_field) if isinstance(record, dict) else None
            if not isinstance(text, str):
                raise PrepareError(
                    f"input {source.where}:{number}: no string field {text_field!r} (--text-field)"
                )
            yield text


def _parquet(source: Source, text_field: str) -> Iterator[str]:
    import pyarrow.parquet as pq  # optional: checked in corpus_files

    with source.open(ranged=True) as raw:
        table = pq.ParquetFile(raw)
        if text_field not in table.schema_arrow.names:
            raise PrepareError(f"input {source.where}: no column {text_field!r} (--text-field)")
        for batch in table.iter_batches(batch_size=BATCH_DOCUMENTS, columns=[text_field]):
            yield from (text for text in batch.column(0).to_pylist() if isinstance(text, str))


def documents(files: Sequence[Source], text_field: str) -> Iterator[str]:
    """Every non-empty document: a JSONL line's or a Parquet row's ``text_field``, or a whole text file.

    Empty documents are skipped everywhere, so they take no number and no shard slot.
    """
    for source in files:
        kind = _kind(source.label)
        if kind in (".jsonl", ".jsonl.gz"):
            texts = _jsonl(source, text_field)
        elif kind == ".parquet":
            texts = _parquet(source, text_field)
        else:
            with _open_text(source) as stream:
                texts = iter([stream.read()])
        yield from (text for text in texts if text)


def corpus_sha256(files: Sequence[Source]) -> str:
    """Names and sizes of the inputs: cheap, and enough to notice that a rerun was given another corpus.

    Names relative to the inputs given, so workers started from other directories agree, and a prefix
    and its copy on disk have the same plan (their shards are the same bytes).
    """
    digest = hashlib.sha256()
    for source in files:
        digest.update(f"{source.label}\0{source.size}\n".encode())
    return digest.hexdigest()


def source_record(inputs: Sequence[Path | str], files: Sequence[Source]) -> dict[str, Any]:
    """What the manifest records of where the corpus came from: the inputs as given, and each file's name,
    size and (for S3) ETag, so a later reader can tell whether the objects still are the ones prepared."""
    listed = [{"name": s.label, "size": s.size} | ({"etag": s.etag} if s.etag else {}) for s in files]
    return {"inputs": [str(given) for given in inputs], "files": listed}


def _tokenizers() -> Any:
    if importlib.util.find_spec("tokenizers") is None:
        raise PrepareError("preparation needs the tokenizers package (pip install tokenizers), not installed")
    import tokenizers  # preparation only: training never imports it

    return tokenizers


def load_tokenizer(path: Path, eos_token: str | None) -> tuple[Any, int]:
    """The tokenizer and its end-of-document id; a missing file or EOS is refused by name."""
    if not path.is_file():
        raise PrepareError(f"--tokenizer {path}: no such file (a Hugging Face tokenizer.json)")
    try:
        tokenizer = _tokenizers().Tokenizer.from_file(str(path))
    except Exception as err:  # the Rust side raises plain Exception for a malformed file
        raise PrepareError(f"--tokenizer {path}: not a tokenizer.json ({err})") from err
    candidates = (eos_token,) if eos_token else EOS_CANDIDATES
    for token in candidates:
        eos = tokenizer.token_to_id(token)
        if eos is not None:
            return tokenizer, int(eos)
    raise PrepareError(f"--tokenizer {path}: none of {', '.join(candidates)} is a token (--eos-token)")


def train_tokenizer(
    inputs: Sequence[Path | str],
    output: Path,
    vocab_size: int,
    text_field: str = "text",
    environ: Mapping[str, str] | None = None,
) -> str:
    """Train a byte-level BPE tokenizer on ``inputs`` and save it as ``output``; returns its sha256.

    So a corpus can be prepared with nothing downloaded. Byte-level, like GPT-2's and Llama 3's: every
    string encodes, with no unknown token. ``<|endoftext|>`` is its one special token (the EOS).
    """
    if vocab_size < 257 + 1:
        raise PrepareError(f"--vocab-size {vocab_size}: at least 258 (256 bytes, the EOS, one merge)")
    files = corpus_files(inputs, environ)
    if next(documents(files, text_field), None) is None:
        raise PrepareError(f"input {', '.join(map(str, inputs))}: no documents (every text is empty)")
    tk = _tokenizers()
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_CANDIDATES[0]],
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(documents(files, text_field), trainer=trainer)
    output.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(output))
    return sha256_file(output)


def _entry_path(output: Path, shard: int) -> Path:
    return output / f"shard-{shard:05d}.json"


def shard_prefix(output: Path, shard: int) -> Path:
    """``DIR/shard-NNNNN``: the prefix of a shard's ``.bin``/``.idx``."""
    return output / f"shard-{shard:05d}"


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Atomic: a reader (another worker, a training run) sees the old file or the new one, never half."""
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(partial, path)


def check_output(output: Path, plan: Plan) -> None:
    """Refuse a directory holding shards of another tokenizer, corpus or shard count, naming what differs."""
    held = [p for p in (output / MANIFEST, *sorted(output.glob("shard-*.json"))) if p.is_file()]
    for path in held:
        data = _read_json(path)
        theirs = (data or {}).get("plan")
        if theirs == plan.as_dict():
            continue
        if not isinstance(theirs, dict):
            raise PrepareError(f"--output {output}: {path.name} is not a shard entry of this format")
        differs = sorted(k for k, v in plan.as_dict().items() if theirs.get(k) != v)
        what = "another tokenizer's shards" if "tokenizer_sha256" in differs else "shards of another plan"
        raise PrepareError(
            f"--output {output}: holds {what} ({path.name} differs in {', '.join(differs)}); "
            "choose another --output or remove them"
        )


def shard_complete(output: Path, shard: int, plan: Plan) -> dict[str, Any] | None:
    """The shard's entry when its files match it (same plan, same sha256 of both files), else ``None``."""
    entry = _read_json(_entry_path(output, shard))
    if entry is None or entry.get("plan") != plan.as_dict():
        return None
    bin_path, idx_path = paths(shard_prefix(output, shard))
    if not (bin_path.is_file() and idx_path.is_file()):
        return None
    if sha256_file(bin_path) != entry.get("bin_sha256") or sha256_file(idx_path) != entry.get("idx_sha256"):
        return None
    return entry


def workers_from_env(environ: Mapping[str, str]) -> tuple[int, int]:
    """``(worker, workers)`` from the launcher: torchrun's RANK/WORLD_SIZE, else a Slurm array, else 0/1."""
    if "RANK" in environ and "WORLD_SIZE" in environ:
        return int(environ["RANK"]), int(environ["WORLD_SIZE"])
    if "SLURM_ARRAY_TASK_ID" in environ and "SLURM_ARRAY_TASK_COUNT" in environ:
        first = int(environ.get("SLURM_ARRAY_TASK_MIN", "0"))
        return int(environ["SLURM_ARRAY_TASK_ID"]) - first, int(environ["SLURM_ARRAY_TASK_COUNT"])
    return 0, 1


def _write_shards(
    output: Path, plan: Plan, todo: list[int], texts: Iterator[str], tokenizer: Any, outcome: Outcome
) -> None:
    """One pass over the corpus; only documents of the shards in ``todo`` are tokenized."""
    writers = {s: IndexedWriter(shard_prefix(output, s).with_suffix(".partial"), plan.dtype) for s in todo}
    pending: list[tuple[int, str]] = []

    def flush() -> None:
        encoded = tokenizer.encode_batch([text for _shard, text in pending], add_special_tokens=False)
        for (shard, _text), enc in zip(pending, encoded, strict=True):
            writers[shard].add_document([*enc.ids, plan.eos_id])
        pending.clear()

    try:
        for number, text in enumerate(texts):
            shard = number % plan.num_shards
            if shard in writers:
                pending.append((shard, text))
                if len(pending) >= BATCH_DOCUMENTS:
                    flush()
        if pending:
            flush()
    except BaseException:
        for writer in writers.values():
            writer.__exit__(RuntimeError, None, None)
        raise
    for shard, writer in writers.items():
        writer.close()
        _publish(output, shard, writer, plan, outcome)


def _publish(output: Path, shard: int, writer: IndexedWriter, plan: Plan, outcome: Outcome) -> None:
    """Rename the finished files into place, then write the entry that marks the shard complete."""
    final_bin, final_idx = paths(shard_prefix(output, shard))
    os.replace(writer.bin_path, final_bin)
    os.replace(writer.idx_path, final_idx)
    done = IndexedDataset.open(shard_prefix(output, shard))
    entry = {
        "plan": plan.as_dict(),
        "shard": shard,
        "documents": done.num_documents,
        "tokens": done.num_tokens,
        "bin_sha256": sha256_file(final_bin),
        "idx_sha256": sha256_file(final_idx),
    }
    _write_json(_entry_path(output, shard), entry)
    outcome.written.append(shard)
    outcome.documents += done.num_documents
    outcome.tokens += done.num_tokens


def write_manifest(
    output: Path, plan: Plan, source: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """``manifest.json`` once every shard has an entry of this plan; ``None`` while some are missing.

    ``source`` (:func:`source_record`) is recorded as it is; the plan alone decides what the shards hold.
    """
    entries = [_read_json(_entry_path(output, s)) for s in range(plan.num_shards)]
    if any(e is None or e.get("plan") != plan.as_dict() for e in entries):
        return None
    shards = [
        {k: e[k] for k in ("documents", "tokens", "bin_sha256", "idx_sha256")} | {"name": f"shard-{i:05d}"}
        for i, e in enumerate(entries)
        if e is not None
    ]
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "container": "megatron-core indexed dataset (MMIDIDX version 1)",
        "sharding": "document i goes to shard i mod num_shards",
        "plan": plan.as_dict(),
        "tokenizer": {"file": TOKENIZER_FILE, "sha256": plan.tokenizer_sha256, "vocab_size": plan.vocab_size},
        "eos_id": plan.eos_id,
        "dtype": plan.dtype,
        "documents": sum(s["documents"] for s in shards),
        "tokens": sum(s["tokens"] for s in shards),
        "shards": shards,
    }
    if source is not None:
        manifest["source"] = dict(source)
    _write_json(output / MANIFEST, manifest)
    return manifest


def _my_shards(num_shards: int, shard_index: Sequence[int], worker: tuple[int, int]) -> list[int]:
    if num_shards < 1:
        raise PrepareError(f"--num-shards {num_shards}: at least 1")
    bad = [i for i in shard_index if not 0 <= i < num_shards]
    if bad:
        raise PrepareError(f"--shard-index {bad[0]}: outside 0..{num_shards - 1} (--num-shards {num_shards})")
    if shard_index:
        return sorted(set(shard_index))
    rank, world = worker
    if not 0 <= rank < world:
        raise PrepareError(f"worker {rank} of {world}: the launcher's rank is outside its world size")
    return [s for s in range(num_shards) if s % world == rank]


@dataclass
class Checked:
    """What the checks before any write found: the tokenizer, the plan and the corpus, its first document
    already read (so a corpus without one is refused before anything is written)."""

    tokenizer: Any
    plan: Plan
    first: str
    texts: Iterator[str]
    source: dict[str, Any]


def check(
    inputs: Sequence[Path | str],
    output: Path,
    tokenizer_path: Path,
    *,
    num_shards: int = 1,
    text_field: str = "text",
    eos_token: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Checked:
    """Every refusal a preparation can make before it writes: tokenizer, inputs, documents, output.

    Separate from :func:`prepare` so a launcher can run it on the submit host before a job is queued.
    """
    tokenizer, eos_id = load_tokenizer(tokenizer_path, eos_token)
    files = corpus_files(inputs, environ)
    texts = documents(files, text_field)
    first = next(texts, None)
    if first is None:
        raise PrepareError(f"input {', '.join(map(str, inputs))}: no documents (every text is empty)")
    if num_shards < 1:
        raise PrepareError(f"--num-shards {num_shards}: at least 1")
    vocab_size = int(tokenizer.get_vocab_size(with_added_tokens=True))
    plan = Plan(
        tokenizer_sha256=sha256_file(tokenizer_path),
        vocab_size=vocab_size,
        eos_id=eos_id,
        dtype=token_dtype(vocab_size).name,
        num_shards=num_shards,
        text_field=text_field,
        corpus_sha256=corpus_sha256(files),
    )
    if output.exists() and not output.is_dir():
        raise PrepareError(f"--output {output}: exists and is not a directory")
    if output.is_dir():
        check_output(output, plan)
    return Checked(tokenizer, plan, first, texts, source_record(inputs, files))


def prepare(
    inputs: Sequence[Path | str],
    output: Path,
    tokenizer_path: Path,
    *,
    num_shards: int = 1,
    shard_index: Sequence[int] = (),
    worker: tuple[int, int] = (0, 1),
    text_field: str = "text",
    eos_token: str | None = None,
    manifest: bool = True,
    environ: Mapping[str, str] | None = None,
) -> Outcome:
    """Tokenize ``inputs`` into this worker's shards of ``output``; every check runs before any write.

    ``manifest=False`` leaves ``manifest.json`` to the caller: a job whose ranks meet at a barrier has one
    rank write it once every rank is done, rather than whichever rank happens to finish last.
    """
    started = time.perf_counter()
    checked = check(
        inputs,
        output,
        tokenizer_path,
        num_shards=num_shards,
        text_field=text_field,
        eos_token=eos_token,
        environ=environ,
    )
    tokenizer, plan, first, texts = checked.tokenizer, checked.plan, checked.first, checked.texts
    mine = _my_shards(num_shards, shard_index, worker)
    output.mkdir(parents=True, exist_ok=True)
    copy = output / TOKENIZER_FILE
    if not copy.is_file() or sha256_file(copy) != plan.tokenizer_sha256:
        partial = copy.with_name(f"{copy.name}.{os.getpid()}.partial")
        shutil.copyfile(tokenizer_path, partial)
        os.replace(partial, copy)
    outcome = Outcome(plan=plan, source=checked.source)
    todo = []
    for shard in mine:
        (outcome.skipped if shard_complete(output, shard, plan) else todo).append(shard)
    if todo:
        _write_shards(output, plan, todo, _chain(first, texts), tokenizer, outcome)
    outcome.manifest = write_manifest(output, plan, checked.source) if manifest else None
    outcome.seconds = time.perf_counter() - started
    return outcome


def _chain(first: str, rest: Iterator[str]) -> Iterator[str]:
    yield first
    yield from rest


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trainstack_train.prepare", description=__doc__.split("\n", maxsplit=1)[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    tok = sub.add_parser("tokenizer", help="train a byte-level BPE tokenizer.json on the inputs")
    tok.add_argument("--output", required=True, type=Path, help="tokenizer.json to write")
    tok.add_argument("--vocab-size", type=int, default=8192, help="including the 256 bytes and the EOS")
    shards = sub.add_parser("shards", help="tokenize the inputs into indexed-dataset shards and a manifest")
    shards.add_argument("--output", required=True, type=Path, help="directory for shards and manifest.json")
    shards.add_argument("--tokenizer", required=True, type=Path, help="a Hugging Face tokenizer.json")
    shards.add_argument(
        "--num-shards", type=int, default=1, help="shards of the whole corpus (fixed once chosen)"
    )
    shards.add_argument(
        "--shard-index",
        type=int,
        action="append",
        default=[],
        help="write only this shard (repeatable); default: this worker's share (RANK/WORLD_SIZE, Slurm)",
    )
    shards.add_argument(
        "--eos-token", help=f"end-of-document token (default: first of {', '.join(EOS_CANDIDATES)})"
    )
    for each in (tok, shards):
        each.add_argument("--text-field", default="text", help="JSONL key or Parquet column holding the text")
        each.add_argument(
            "inputs",
            nargs="+",
            help="files, directories or s3://bucket/prefix (.jsonl[.gz], .txt[.gz], .parquet)",
        )
    return parser


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """CLI: ``tokenizer`` trains one, ``shards`` prepares; one JSON summary line on stdout."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "tokenizer":
            digest = train_tokenizer(args.inputs, args.output, args.vocab_size, args.text_field, environ)
            print(json.dumps({"tokenizer": str(args.output), "sha256": digest}))
            return 0
        outcome = prepare(
            args.inputs,
            args.output,
            args.tokenizer,
            num_shards=args.num_shards,
            shard_index=args.shard_index,
            worker=workers_from_env(os.environ if environ is None else environ),
            text_field=args.text_field,
            eos_token=args.eos_token,
            environ=environ,
        )
    except PrepareError as err:
        parser.error(str(err))
    rate = outcome.tokens / outcome.seconds if outcome.seconds else 0.0
    summary = {
        "written": outcome.written,
        "skipped": outcome.skipped,
        "documents": outcome.documents,
        "tokens": outcome.tokens,
        "seconds": round(outcome.seconds, 3),
        "tokens_per_s": round(rate),
        "manifest": outcome.manifest is not None,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
