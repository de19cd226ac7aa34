"""One preparation job: every rank writes its shards, rank 0 writes the manifest once all are complete.

Why a process group: torchrun starts the ranks on every node, and three moments must be ordered across them
(a trained tokenizer exists before any rank reads it, every shard is complete before the manifest is
written, the ranks' outcomes reach rank 0's summary). A gloo group on the CPU does that in three collective
calls; the tokenizing itself never touches torch. Shards are split as :mod:`trainstack_train.prepare` splits
them (rank ``r`` of ``W`` writes the shards ``s`` with ``s mod W == r``), so a relaunch on another number of
nodes writes the same bytes and skips what is already complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainstack_train import prepare
from trainstack_train.metrics import emit

from .config import PrepareConfig

TESTCASE = "data/prepare"
# The tokenizer that --tokenizer train writes, inside --output, and what it was trained on; prepare() copies
# it to tokenizer.json once its own checks pass, so a refused output never has its tokenizer.json replaced.
TRAINED = ".tokenizer-trained.json"
TRAINED_FOR = ".tokenizer-trained.for.json"


@dataclass
class RankOutcome:
    """What one rank did: which shards it wrote or found complete, and what they hold."""

    rank: int
    host: str
    written: list[int]
    skipped: list[int]
    documents: int
    tokens: int
    seconds: float


def _group() -> tuple[int, int]:
    """This rank and the world, with a gloo group when torchrun started several."""
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group(backend="gloo")
    return rank, world


def _barrier(world: int) -> None:
    if world > 1:
        import torch.distributed as dist

        dist.barrier()


def _gather(value: Any, world: int) -> list[Any]:
    if world == 1:
        return [value]
    import torch.distributed as dist

    every: list[Any] = [None] * world
    dist.all_gather_object(every, value)
    return every


def trained_tokenizer(cfg: PrepareConfig) -> Path:
    """The BPE of ``--tokenizer train`` in ``--output``: trained once, reused while its corpus is the same.

    Training is deterministic, so a retrained file would be identical; reusing it only saves the time. What it
    was trained on (corpus names and sizes, vocabulary, text field) is recorded beside it.
    """
    output, inputs = Path(cfg.output), [cfg.input]
    path, record = output / TRAINED, output / TRAINED_FOR
    files = prepare.corpus_files(inputs)
    wanted = {
        "corpus_sha256": prepare.corpus_sha256(files),
        "vocab_size": cfg.vocab_size,
        "text_field": cfg.text_field,
    }
    try:
        held = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        held = None
    if path.is_file() and isinstance(held, dict) and held == wanted | {"sha256": prepare.sha256_file(path)}:
        return path
    output.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    digest = prepare.train_tokenizer(inputs, partial, cfg.vocab_size, cfg.text_field)
    os.replace(partial, path)
    record.write_text(json.dumps(wanted | {"sha256": digest}, sort_keys=True) + "\n", encoding="utf-8")
    return path


def _metric_lines(outcome: RankOutcome, entries: dict[int, dict[str, Any]]) -> None:
    """One line per shard this rank handled (every rank prints: the log shows which node wrote what)."""
    for shard in sorted(outcome.written + outcome.skipped):
        entry = entries.get(shard, {})
        line = {
            "shard": shard,
            "rank": outcome.rank,
            "host": outcome.host,
            "documents": entry.get("documents"),
            "tokens": entry.get("tokens"),
            "seconds": round(outcome.seconds, 3),
            "skipped": shard in outcome.skipped,
        }
        emit(line)


def _summary(
    cfg: PrepareConfig,
    world: int,
    manifest: dict[str, Any],
    outcomes: list[RankOutcome],
    tokenizer: Path,
    elapsed: float,
) -> dict[str, Any]:
    """The entrypoint contract's keys (no loss, no GPU: null) and what was prepared, per rank."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    written_tokens = sum(o.tokens for o in outcomes)
    manifest_path = Path(cfg.output) / prepare.MANIFEST
    return {
        "testcase": TESTCASE,
        "world_size": world,
        "nodes": max(1, world // max(1, local)),
        "device": "cpu",
        "gpu_model": None,
        "steps": 0,
        "first_loss": None,
        "final_loss": None,
        "tokens_per_s": round(written_tokens / elapsed, 1) if elapsed and written_tokens else None,
        "tflops_per_gpu": None,
        "mfu": None,
        "peak_mem_gb": None,
        "elapsed_s": round(elapsed, 3),
        "corpus": {
            "input": cfg.input,
            "output": cfg.output,
            "manifest_sha256": hashlib.sha256(manifest_path.read_bytes()).hexdigest(),
            "documents": manifest["documents"],
            "tokens": manifest["tokens"],
            "shards": len(manifest["shards"]),
            "tokenizer": {
                "source": "trained" if cfg.trains_tokenizer else str(tokenizer),
                "sha256": manifest["tokenizer"]["sha256"],
                "vocab_size": manifest["tokenizer"]["vocab_size"],
            },
            "written": sorted(s for o in outcomes for s in o.written),
            "skipped": sorted(s for o in outcomes for s in o.skipped),
        },
        "ranks": [asdict(o) for o in outcomes],
    }


def _write_summary(path: str, body: dict[str, Any]) -> None:
    target = Path(path)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(target)


def run(cfg: PrepareConfig) -> int:
    """Tokenizer (rank 0, when trained), every rank's shards, a barrier, rank 0's manifest and summary."""
    started = time.perf_counter()
    rank, world = _group()
    output = Path(cfg.output)
    if cfg.trains_tokenizer:
        if rank == 0:
            trained_tokenizer(cfg)
        _barrier(world)
        tokenizer = output / TRAINED
    else:
        tokenizer = Path(cfg.tokenizer)
    mine = prepare.prepare(
        [cfg.input],
        output,
        tokenizer,
        num_shards=cfg.num_shards,
        worker=(rank, world),
        text_field=cfg.text_field,
        eos_token=cfg.eos_token or None,
        manifest=False,
    )
    outcome = RankOutcome(
        rank, socket.gethostname(), mine.written, mine.skipped, mine.documents, mine.tokens, mine.seconds
    )
    entries = {
        s: prepare.shard_complete(output, s, mine.plan) or {} for s in outcome.written + outcome.skipped
    }
    _metric_lines(outcome, entries)
    # Every rank's shards are complete (published, entry written) once all have reached this point.
    outcomes = _gather(outcome, world)
    if rank != 0:
        return 0
    assert mine.plan is not None
    manifest = prepare.write_manifest(output, mine.plan, mine.source)
    if manifest is None:
        missing = [s for s in range(cfg.num_shards) if prepare.shard_complete(output, s, mine.plan) is None]
        print(f"{TESTCASE}: shards {missing} of {output} are not complete after every rank ended", flush=True)
        return 1
    elapsed = time.perf_counter() - started
    summary = _summary(cfg, world, manifest, outcomes, tokenizer, elapsed)
    corpus = summary["corpus"]
    print(
        f"{TESTCASE}: {corpus['documents']} documents, {corpus['tokens']} tokens in {corpus['shards']} "
        f"shards at {output} (written {corpus['written']}, skipped {corpus['skipped']}) in {elapsed:.1f} s",
        flush=True,
    )
    if cfg.summary_json:
        _write_summary(cfg.summary_json, summary)
    return 0
