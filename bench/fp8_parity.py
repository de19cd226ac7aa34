#!/usr/bin/env python3
"""FP8 against bf16 on the same run: loss parity over a few hundred steps, and the throughput of each.

Trains ``testcases/pytorch/fsdp`` on one GPU with the same shape, seed, data and learning-rate schedule, once
with ``--precision bf16`` and once per FP8 scaling recipe (``--fp8-recipes``), then writes one JSON (each
run's figures and loss curve, the verdict) and a PNG of the curves beside it. Throughput and MFU of every run
count the same bf16-equivalent model FLOPs (``6N + 12 L d s`` per token) against the bf16 dense peak, so an
FP8 run's MFU is "bf16 work done per second" and its gain reads directly.

Parity rule: the mean loss over the last ``--tail`` steps of the FP8 run lies within ``--tolerance``
(relative) of the bf16 run's. Each step sees a different batch, so single steps are too noisy to compare.

    python3 -m bench.fp8_parity --steps 300 --output gpu-results/fp8_parity_llama3_2_1b.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench import catalog_peak
from bench.support.plotting import pyplot_or_reason
from bench.support.train_run import run_summary

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "testcases" / "pytorch" / "fsdp" / "train.py"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Shape, run length, the parity rule and where the results go."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default="llama3_2_1b")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--warmup-steps", type=int, default=30)
    parser.add_argument(
        "--fp8-recipes",
        default="tensorwise",
        help="comma-separated: one FP8 run each; RECIPE-head also puts the LM head in float8",
    )
    parser.add_argument("--tail", type=int, default=20, help="steps averaged at the end of each curve")
    parser.add_argument("--tolerance", type=float, default=0.01, help="relative, on the tail means")
    parser.add_argument("--instance-type", default=catalog_peak.DEFAULT_INSTANCE_TYPE)
    parser.add_argument("--timeout", type=int, default=420, help="seconds per training run")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--extra", default="", help="more train.py arguments for both runs, space-separated")
    return parser.parse_args(argv)


def train(args: argparse.Namespace, run: str, peak: float, workdir: Path) -> dict[str, Any]:
    """One run (``bf16`` or ``fp8_<recipe>``) of the test case's entry point: its summary, or the failure."""
    precision, _sep, recipe = run.partition("_")
    # ``tensorwise-head``: the recipe with the LM head in float8 too (``--fp8-head true``).
    recipe, _sep, scope = recipe.partition("-")
    summary = workdir / f"summary_{run}.json"
    cmd = [
        sys.executable,
        str(TRAIN),
        *("--config", args.config, "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len)),
        *("--steps", str(args.steps), "--lr", str(args.lr), "--warmup-steps", str(args.warmup_steps)),
        *("--precision", precision, "--fp8-recipe", recipe or "tensorwise", "--peak-tflops", str(peak)),
        *("--metric-warmup-steps", "10", "--summary-json", str(summary)),
        *(("--fp8-head", "true") if scope == "head" else ()),
        *args.extra.split(),
    ]
    return run_summary(cmd, summary, workdir / f"train_{run}.log", args.timeout)


def tail_mean(losses: list[float], tail: int) -> float:
    """Mean of the last ``tail`` losses (all of them when fewer)."""
    window = losses[-tail:] or losses
    return sum(window) / len(window)


def verdict(runs: dict[str, dict[str, Any]], tail: int, tolerance: float) -> dict[str, Any]:
    """Per FP8 run: tail means, the relative gap to bf16, pass/fail, and the speed against bf16."""
    base = runs["bf16"]
    if not base.get("ok"):
        return {"parity": None, "reason": "the bf16 run failed"}
    reference = tail_mean(base["losses"], tail)
    document: dict[str, Any] = {"tail_steps": tail, "tolerance": tolerance, "bf16_tail_mean_loss": reference}
    for name, run in runs.items():
        if name == "bf16":
            continue
        if not run.get("ok"):
            document[name] = {"parity": None, "reason": "the run failed"}
            continue
        mean = tail_mean(run["losses"], tail)
        gap = (mean - reference) / reference
        document[name] = {
            "tail_mean_loss": mean,
            "relative_gap": gap,
            "parity": abs(gap) <= tolerance,
            "speedup_vs_bf16": run["tokens_per_s"] / base["tokens_per_s"],
        }
    checked = [value["parity"] for key, value in document.items() if key.startswith("fp8")]
    document["parity"] = bool(checked) and all(checked)
    return document


def plot(runs: dict[str, dict[str, Any]], document: dict[str, Any], target: Path) -> str:
    """Both loss curves and their difference; the JSON records when matplotlib is missing."""
    plt, reason = pyplot_or_reason()
    if plt is None:
        return f"not drawn: {reason}"

    fig, (curves, diff) = plt.subplots(2, 1, figsize=(10, 7), sharex=True, height_ratios=(3, 1))
    losses = {name: run["losses"] for name, run in runs.items() if run.get("ok")}
    for name, curve in losses.items():
        rate = runs[name]["tokens_per_s"]
        curves.plot(range(1, len(curve) + 1), curve, label=f"{name} ({rate:,.0f} tokens/s)", linewidth=1)
    curves.set_ylabel("training loss")
    curves.set_yscale("log")
    curves.legend()
    result = document.get("verdict", {})
    gaps = [
        f"{name} {100 * value['relative_gap']:+.2f} %"
        for name, value in result.items()
        if name.startswith("fp8") and value.get("relative_gap") is not None
    ]
    title = f"{document['config']}, {document['batch_size']} x {document['seq_len']}"
    if gaps:
        title += f"; tail-mean gap to bf16: {', '.join(gaps)} (tolerance {100 * result['tolerance']:.1f} %)"
    curves.set_title(title, fontsize=9)
    for name, curve in losses.items():
        if name != "bf16" and "bf16" in losses:
            delta = [f - b for b, f in zip(losses["bf16"], curve, strict=False)]
            diff.plot(range(1, len(delta) + 1), delta, linewidth=0.8, label=name)
    diff.axhline(0, color="grey", linewidth=0.5)
    diff.set_ylabel("loss - bf16 loss")
    diff.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target.name


def main(argv: list[str] | None = None) -> int:
    """Both runs, then the JSON and the plot; exit 1 when a run failed or parity does not hold."""
    args = parse_args(argv)
    peak = catalog_peak.peak_tflops(args.instance_type)
    workdir = args.output.parent / f"logs_{args.output.stem}"
    workdir.mkdir(parents=True, exist_ok=True)
    names = ["bf16", *(f"fp8_{recipe}" for recipe in args.fp8_recipes.split(",") if recipe)]
    runs = {name: train(args, name, peak, workdir) for name in names}
    document: dict[str, Any] = {
        "benchmark": "fp8_parity",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": args.config,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "steps": args.steps,
        "lr": args.lr,
        "warmup_steps": args.warmup_steps,
        "fp8_recipes": args.fp8_recipes,
        "train_args": args.extra,
        "peak_tflops": peak,
        "flops": "bf16-equivalent model FLOPs (6N + 12 L d s per token) for both runs, MFU vs the bf16 peak",
        "verdict": verdict(runs, args.tail, args.tolerance),
        "runs": runs,
    }
    document["plot"] = plot(runs, document, args.output.with_suffix(".png"))
    args.output.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(document["verdict"], indent=2))
    for name, run in runs.items():
        if run.get("ok"):
            print(f"{name}: {run['tokens_per_s']:,.0f} tokens/s, MFU {100 * (run['mfu'] or 0):.1f} %")
        else:
            print(f"{name}: FAILED {run.get('error', '')[-300:]}")
    return 0 if document["verdict"].get("parity") else 1


if __name__ == "__main__":
    sys.exit(main())
