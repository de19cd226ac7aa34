"""Real data against synthetic, and checkpoints synchronous against asynchronous, for pytorch/fsdp on one GPU.

Four runs of ``testcases/pytorch/fsdp/train.py`` with the same shape, seed and schedule, in one invocation:

* ``synthetic``: random tokens made on the device (the loader costs nothing: the ceiling for real data);
* ``corpus``: a prepared corpus (``--corpus``, docs/data.md) read by the numpy reader;
* ``corpus_sync`` and ``corpus_async``: the corpus run checkpointing every ``--checkpoint-every`` steps to
  ``--checkpoint-dir`` with ``torch.distributed.checkpoint``, written in the step's path or by a background
  thread (``--checkpoint-async``), keeping the newest one;
* ``corpus_async_pinned`` (only when asked for in ``--runs``): asynchronous, staged into one pinned buffer
  kept for the run (``--checkpoint-staging pinned``) instead of new pageable memory each save.

The JSON has each run's summary and two comparisons: the corpus rate as a fraction of the synthetic one, and
per checkpoint the training time lost (``blocked_s``) and the write time (``write_s``) of both ways. Rates
are the summaries' steady-state window, so a checkpoint's stall shows in ``blocked_s``, not in tokens/s.

    python3 -m bench.data_checkpoint --corpus /data/kjv --checkpoint-dir /scratch/ckpt \
        --output bench/results/gpu-h200/data_checkpoint_llama3_2_1b.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from bench import catalog_peak
from bench.support.plotting import pyplot_or_reason
from bench.support.train_run import run_summary

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "testcases" / "pytorch" / "fsdp" / "train.py"
RUNS = ("synthetic", "corpus", "corpus_sync", "corpus_async", "corpus_async_pinned")
# The runs of a bare invocation: the pinned one holds the whole state in page-locked host memory as well.
DEFAULT_RUNS = RUNS[:4]
# The checkpointing runs, in the order the comparison and the plot list them.
SAVING_RUNS = ("corpus_sync", "corpus_async", "corpus_async_pinned")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Shape, run length, the corpus, where checkpoints go and where the results go."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default="llama3_2_1b")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--corpus", type=Path, required=True, help="a prepared corpus (manifest.json)")
    parser.add_argument("--checkpoint-dir", type=Path, required=True, help="emptied before each run")
    parser.add_argument("--checkpoint-write-threads", type=int, default=1, help="writer threads per rank")
    parser.add_argument("--instance-type", default=catalog_peak.DEFAULT_INSTANCE_TYPE)
    parser.add_argument("--timeout", type=int, default=600, help="seconds per training run")
    parser.add_argument("--runs", default=",".join(DEFAULT_RUNS), help=f"comma-separated subset of {RUNS}")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument(
        "--merge",
        type=Path,
        help="an earlier output of this benchmark on the same machine: its runs are kept where not rerun",
    )
    return parser.parse_args(argv)


def command(args: argparse.Namespace, run: str, peak: float, summary: Path) -> list[str]:
    """The entry point's arguments for ``run``: the same shape and schedule, its data and checkpoints."""
    cmd = [
        sys.executable,
        str(TRAIN),
        *("--config", args.config, "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len)),
        *("--steps", str(args.steps), "--peak-tflops", str(peak), "--metric-warmup-steps", "5"),
        *("--data", "synthetic" if run == "synthetic" else str(args.corpus), "--summary-json", str(summary)),
    ]
    if run.startswith("corpus_"):
        cmd += [
            "--checkpoint-dir",
            str(args.checkpoint_dir),
            "--checkpoint-every",
            str(args.checkpoint_every),
        ]
        cmd += ["--checkpoint-keep-last", "1", "--checkpoint-async", str(run != "corpus_sync").lower()]
        if run == "corpus_async_pinned":
            cmd += ["--checkpoint-staging", "pinned"]
        cmd += ["--checkpoint-write-threads", str(args.checkpoint_write_threads)]
    return cmd


def own_blocked(saved: dict[str, Any]) -> float:
    """Training time a run lost to its own saves: the time each save held the step, less the time it spent
    waiting for the previous asynchronous write (which a checkpoint interval longer than one write would not
    cost). The wait for the last write at the end of the run is not a save's and is reported apart."""
    held = saved.get("blocked_each_s", [])[: saved["saved"]]
    return sum(held) - sum(saved.get("waited_s", []))


def final_wait(saved: dict[str, Any]) -> float:
    """Time the end of the run waited for the last asynchronous write (0 for synchronous saves)."""
    return sum(saved.get("blocked_each_s", [])[saved["saved"] :])


def compare(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The corpus rate against synthetic, and what a checkpoint costs each way."""
    ok = {name: run for name, run in runs.items() if run.get("ok")}
    out: dict[str, Any] = {}
    if "synthetic" in ok and "corpus" in ok:
        out["corpus_rate_fraction"] = ok["corpus"]["tokens_per_s"] / ok["synthetic"]["tokens_per_s"]
    for name in SAVING_RUNS:
        if name in ok:
            saved = ok[name]["checkpoints"]
            count = max(saved["saved"], 1)
            out[name] = {
                "saved": saved["saved"],
                "blocked_s_per_checkpoint": saved["blocked_s"] / count,
                "write_s_per_checkpoint": sum(saved["write_s"]) / count,
                "elapsed_s": ok[name]["elapsed_s"],
            }
            if "blocked_each_s" in saved:  # summaries of a test case that times each save
                out[name]["own_blocked_s_per_checkpoint"] = own_blocked(saved) / count
                out[name]["final_wait_s"] = final_wait(saved)
    return out


def plot(runs: dict[str, dict[str, Any]], comparison: dict[str, Any], target: Path) -> str:
    """Tokens/s of each run, and per checkpoint the time lost against the write time (JSON: if not drawn)."""
    plt, reason = pyplot_or_reason()
    if plt is None:
        return f"not drawn: {reason}"

    fig, (rates, costs) = plt.subplots(1, 2, figsize=(11, 4))
    names = [name for name in RUNS if runs.get(name, {}).get("ok")]
    rates.bar(names, [runs[name]["tokens_per_s"] for name in names], color="tab:blue")
    rates.set_ylabel("tokens/s (steady state)")
    rates.set_title("data: synthetic vs prepared corpus", fontsize=9)
    ways = [name for name in SAVING_RUNS if name in comparison]
    width = 0.38
    for offset, key, label in (
        (-width / 2, "own_blocked_s_per_checkpoint", "training time lost (own save)"),
        (width / 2, "write_s_per_checkpoint", "write"),
    ):
        costs.bar(
            [i + offset for i in range(len(ways))],
            [comparison[way].get(key, float("nan")) for way in ways],
            width,
            label=label,
        )
    costs.set_xticks(range(len(ways)), ways)
    costs.set_ylabel("seconds per checkpoint")
    costs.set_title("checkpoints: synchronous vs asynchronous", fontsize=9)
    costs.legend()
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target.name


def corpus_record(corpus: Path) -> dict[str, Any]:
    """What the corpus holds, from its manifest (its documents and tokens, the tokenizer's size)."""
    manifest = json.loads((corpus / "manifest.json").read_text(encoding="utf-8"))
    return {key: manifest[key] for key in ("documents", "tokens", "tokenizer") if key in manifest}


def merge(earlier: Path | None, runs: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """Take the runs of an earlier output that this invocation did not run, so that one JSON holds all four.

    A machine call has a time limit shorter than the four runs together; the pairs that are compared
    (synthetic with corpus, synchronous with asynchronous) each run within one call.
    """
    if earlier is None:
        return None
    document = json.loads(earlier.read_text(encoding="utf-8"))
    taken = [name for name in document.get("runs", {}) if name not in runs]
    for name in taken:
        runs[name] = document["runs"][name]
    return {"file": earlier.name, "date_utc": document.get("date_utc"), "runs": taken}


def main(argv: list[str] | None = None) -> int:
    """Every run asked for, then the JSON and the plot; exit 1 when a run failed."""
    args = parse_args(argv)
    peak = catalog_peak.peak_tflops(args.instance_type)
    workdir = args.output.parent / f"logs_{args.output.stem}"
    workdir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "testcases" / "common"), os.environ.get("PYTHONPATH", "")]),
    }
    runs: dict[str, dict[str, Any]] = {}
    for run in [name for name in args.runs.split(",") if name]:
        if run not in RUNS:
            raise SystemExit(f"--runs: {run!r} is not one of {RUNS}")
        shutil.rmtree(args.checkpoint_dir, ignore_errors=True)
        summary = workdir / f"summary_{run}.json"
        runs[run] = run_summary(
            command(args, run, peak, summary), summary, workdir / f"train_{run}.log", args.timeout, env
        )
    shutil.rmtree(args.checkpoint_dir, ignore_errors=True)
    merged = merge(args.merge, runs)
    comparison = compare(runs)
    document: dict[str, Any] = {
        "benchmark": "data_checkpoint",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": args.config,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "steps": args.steps,
        "checkpoint_every": args.checkpoint_every,
        "checkpoint_write_threads": args.checkpoint_write_threads,
        "corpus": corpus_record(args.corpus),
        "peak_tflops": peak,
        "comparison": comparison,
        "runs": runs,
    }
    if merged:
        document["merged_from"] = merged
    document["plot"] = plot(runs, comparison, args.output.with_suffix(".png"))
    args.output.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(comparison, indent=2))
    failed = [name for name, run in runs.items() if not run.get("ok")]
    for name in failed:
        print(f"{name}: FAILED {runs[name].get('error', '')[-300:]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
