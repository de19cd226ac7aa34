#!/usr/bin/env python3
"""Read a ``train_throughput`` JSON: the strongest baseline and ours' ratio to it, the docs' table, the plot.

Why a module of its own: the benchmark writes the comparison into its JSON and draws the PNG beside it, and
docs/performance.md's table is rendered from the same JSON by the same code, so the page cannot drift from
the committed file. Standard library only, except matplotlib for the plot.

    python3 -m bench.train_report table bench/results/train_throughput_llama3_2_1b.json   # Markdown
    python3 -m bench.train_report plot RESULT.json OUT.png
    python3 -m bench.train_report energy RESULT.json GPU_CLOCKS.csv   # JSON: watts, joules per step, tokens/J
    python3 -m bench.train_report testcases-collect DIR OUT.json [RUN...]   # the runs' summaries in one JSON
    python3 -m bench.train_report testcases RESULT.json            # Markdown: the test cases side by side
"""

from __future__ import annotations

import csv
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# Rows whose name starts with one of these are baselines; ``ours`` and ``ours_<tag>`` are the test case.
BASELINE_PREFIXES = ("hf_", "titan")
OURS = "ours"
LABELS = {
    "hf_eager": "Hugging Face eager, autocast bf16, AdamW foreach",
    "hf_fsdp2": "Hugging Face + FSDP2 (bf16 params, fp32 reduce), AdamW foreach",
    "hf_compile": "Hugging Face + torch.compile, AdamW foreach",
    "hf_eager_fused": "Hugging Face eager, AdamW fused",
    "hf_compile_fused": "Hugging Face + torch.compile, AdamW fused",
    "hf_liger": "Hugging Face + Liger kernels, AdamW fused",
    "hf_liger_compile": "Hugging Face + Liger kernels + torch.compile, AdamW fused",
    "titan": "torchtitan Llama-3 (per-block compile, AdamW fused)",
    "titan_ac": "torchtitan Llama-3 (per-block compile, full activation checkpointing, AdamW fused)",
    "titan_sac": "torchtitan Llama-3 (per-block compile, every second block checkpointed, AdamW fused)",
    "ours": "**ours** (`pytorch/fsdp`, one process: unsharded)",
    "ours_fsdp": "ours through FSDP2 on the one GPU (`--fsdp true`)",
    "ours_fp8": "ours with `--precision fp8` (float8 block linears, tensorwise; bf16-equivalent FLOPs)",
    "ours_fp8head": "ours with `--precision fp8 --fp8-head true` (block linears and LM head in float8)",
    "ours_bf16state": "ours with bf16 master weights and AdamW states (`--master-dtype bf16`)",
}


def is_baseline(name: str) -> bool:
    """Hugging Face and torchtitan rows; probes and ours are not."""
    return name.startswith(BASELINE_PREFIXES)


def comparison(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest baseline that ran, and each ``ours*`` row's tokens/s ratio to it.

    A failed baseline cannot be the strongest (it has no figure), but the comparison lists it, so a missing
    row is never read as a slow one.
    """
    ran = [r for r in results if r.get("ok") and is_baseline(r["name"])]
    failed = {r["name"]: r.get("error", "") for r in results if not r.get("ok") and is_baseline(r["name"])}
    document: dict[str, Any] = {"strongest_baseline": None, "failed_baselines": failed, "ratios": {}}
    if not ran:
        return document
    best = max(ran, key=lambda r: r["tokens_per_s"])
    document["strongest_baseline"] = best["name"]
    document["strongest_baseline_tokens_per_s"] = best["tokens_per_s"]
    for row in results:
        if row.get("ok") and row["name"].startswith(OURS):
            document["ratios"][row["name"]] = row["tokens_per_s"] / best["tokens_per_s"]
    return document


def _label(row: dict[str, Any]) -> str:
    name = row["name"]
    if name in LABELS:
        return LABELS[name]
    tag = name.removeprefix(OURS + "_")
    return f"ours, `{tag}` variant"


def _failure(row: dict[str, Any]) -> str:
    """The error's first sentence: enough to tell an out-of-memory from a crash in a table cell. The whole
    message stays in the JSON; a cell that quotes it (allocator sizes, free memory) crowds the table out."""
    lines = str(row.get("error", "")).splitlines() or [""]
    sentence = lines[0].split(". ")[0].rstrip(".")
    return sentence[:120].replace("|", "/")


def table(document: dict[str, Any]) -> str:
    """Markdown table of every variant, then the line naming the strongest baseline and the ratio."""
    lines = [
        "| variant | tokens/s | TFLOP/s | MFU | median step | peak memory |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in document["results"]:
        if not row.get("ok"):
            lines.append(f"| {_label(row)} | failed: {_failure(row)} | | | | |")
            continue
        lines.append(
            f"| {_label(row)} | {row['tokens_per_s']:,.0f} | {row['tflops_per_gpu']:.1f} | "
            f"{100 * (row['mfu'] or 0):.1f} % | {1e3 * row['step_time_median_s']:.1f} ms | "
            f"{row['peak_mem_gb'] or 0:.1f} GB |"
        )
    summary = document.get("comparison") or comparison(document["results"])
    best = summary.get("strongest_baseline")
    if best:
        ratios = ", ".join(f"`{name}` {ratio:.2f}x" for name, ratio in summary["ratios"].items())
        against = f"; ours against it: {ratios}" if ratios else "; no row of ours ran"
        lines += ["", f"Strongest baseline in this run: {LABELS.get(best, best)}{against}."]
    lines += floor_lines(document)
    return "\n".join(lines)


def floor_lines(document: dict[str, Any]) -> list[str]:
    """The step's measured floor (bench/floor.py) and each variant's share of it, when the probe ran."""
    probe = document.get("floor_probe") or {}
    if not probe.get("ok"):
        return []
    clocks = probe.get("clocks") or {}
    at = f" at {clocks['sm_clock_mhz_median']:.0f} MHz" if "sm_clock_mhz_median" in clocks else ""
    lines = [
        "",
        f"Floor of one step{at}: GEMMs {probe['gemm_ms']:.1f} ms + attention "
        f"{probe['attention_ms']:.1f} ms = {probe['floor_ms']:.1f} ms "
        f"(the same work back to back: {probe['replay_ms']:.1f} ms).",
    ]
    shares = document.get("against_floor") or {}
    if shares:
        lines.append(
            "Floor over step: "
            + ", ".join(f"`{name}` {100 * row['floor_fraction']:.0f} %" for name, row in shares.items())
            + "."
        )
    lines += [part_line(name, row["parts"]) for name, row in shares.items() if row.get("parts")]
    return lines


def part_line(name: str, parts: dict[str, Any]) -> str:
    """One variant's step in the floor's parts, and the part with the most time over its floor."""
    over = parts["over_floor_ms"]
    return (
        f"`{name}`: GEMM {parts['gemm_ms']:.1f} ms ({over['gemm']:+.1f} over its floor), attention "
        f"{parts['attention_ms']:.1f} ms ({over['attention']:+.1f}), rest {parts['rest_ms']:.1f} ms "
        f"(GPU idle {parts['rest_gpu_idle_ms']:.1f}); held back by {parts['held_back_by']}."
    )


def plot(document: dict[str, Any], target: Path) -> None:
    """Tokens/s per variant (bars) and the timed steps' durations per variant (box plot), one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    rows = [r for r in document["results"] if r.get("ok") and "tokens_per_s" in r]
    warmup = document.get("warmup", 0)
    names = [r["name"] for r in rows]
    colours = ["tab:orange" if n.startswith(OURS) else "tab:blue" for n in names]
    split = {
        name: row["parts"] for name, row in (document.get("against_floor") or {}).items() if "parts" in row
    }
    fig, axes = plt.subplots(1, 3 if split else 2, figsize=(21 if split else 14, 5.5))
    bars, spread = axes[0], axes[1]
    if split:
        _plot_parts(axes[2], split, document["floor_probe"])
    bars.barh(names, [r["tokens_per_s"] for r in rows], color=colours)
    for index, row in enumerate(rows):
        mfu = f" ({100 * row['mfu']:.1f} % MFU)" if row.get("mfu") else ""
        bars.text(row["tokens_per_s"], index, f" {row['tokens_per_s']:,.0f}{mfu}", va="center", fontsize=8)
    bars.invert_yaxis()
    bars.set_xlabel("tokens/s (higher is better)")
    bars.set_title(f"{document.get('config', '')} on {document.get('environment', {}).get('gpu', 'the GPU')}")
    steps = [[1e3 * t for t in r["step_times_s"][warmup:] or r["step_times_s"]] for r in rows]
    spread.boxplot(steps, vert=False, tick_labels=names)
    spread.invert_yaxis()
    spread.set_xlabel("time per timed step (ms)")
    spread.set_title("per-step time spread after warm-up")
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    plt.close(fig)


def _plot_parts(axis: Any, split: dict[str, Any], probe: dict[str, Any]) -> None:
    """Each profiled variant's step as GEMM + attention + other kernels + GPU idle; the floor first."""
    names = ["floor", *split]
    stacks = {
        "GEMM": [probe["gemm_ms"], *(p["gemm_ms"] for p in split.values())],
        "attention": [probe["attention_ms"], *(p["attention_ms"] for p in split.values())],
        "other kernels": [0.0, *(sum(p["rest_kernels_ms"].values()) for p in split.values())],
        "GPU idle": [0.0, *(p["rest_gpu_idle_ms"] for p in split.values())],
    }
    left = [0.0] * len(names)
    for label, values in stacks.items():
        axis.barh(names, values, left=left, label=label)
        left = [a + b for a, b in zip(left, values, strict=True)]
    axis.axvline(probe["floor_ms"], color="black", linestyle="--", linewidth=1)
    axis.invert_yaxis()
    axis.set_xlabel("ms per step: the floor's parts, then the rest (profiled)")
    axis.set_title("step against its measured floor (dashed)")
    axis.legend(fontsize=8, loc="lower right")


def power_samples(text: str, utc_offset_s: float) -> list[tuple[float, float, float]]:
    """``(unix time, watts, SM MHz)`` from nvidia-smi's CSV (timestamp, clocks.sm, power.draw, ...).

    nvidia-smi stamps samples in the machine's local time; the benchmark records that offset.
    """
    samples = []
    for row in csv.reader(text.splitlines()[1:]):
        if len(row) < 5:
            continue  # the last line, cut off when the sampler was stopped
        try:
            stamp = datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=UTC)
            mhz = float(row[1].split()[0])
            watts = float(row[2].split()[0])
        except (IndexError, ValueError):
            continue  # a header repeated in the middle
        samples.append((stamp.timestamp() - utc_offset_s, watts, mhz))
    return samples


def energy(document: dict[str, Any], samples: list[tuple[float, float, float]]) -> dict[str, Any]:
    """Per row: mean power and SM clock over its timed steps, joules per step and tokens per joule.

    Under a power cap, tokens per joule is what a faster step buys: two variants at the same cap differ in
    speed only by the energy each spends per step.
    """
    rows: dict[str, Any] = {}
    for row in document["results"]:
        window = row.get("timed_window_unix") if row.get("ok") else None
        inside = [s for s in samples if window and window[0] <= s[0] <= window[1]]
        if not inside:
            continue
        watts = sum(s[1] for s in inside) / len(inside)
        step_s = row["batch_size"] * document["seq_len"] / row["tokens_per_s"]
        rows[row["name"]] = {
            "samples": len(inside),
            "mean_power_w": watts,
            "mean_sm_clock_mhz": sum(s[2] for s in inside) / len(inside),
            "joules_per_step": watts * step_s,
            "tokens_per_joule": row["tokens_per_s"] / watts,
        }
    return rows


# The runs that bench/gpu/measure.sh's side-by-side parts leave in their directory: summary file, label.
TESTCASE_RUNS = {
    "fsdp_direct": ("pytorch/fsdp", "entrypoint started directly"),
    "titan_direct": ("torchtitan/llama", "entrypoint started directly"),
    "titan_launched": ("torchtitan/llama", "launch_training, local launcher (torchrun)"),
    "megatron_direct": ("megatron/gpt", "entrypoint started directly, `--recompute selective`"),
    "megatron_launched": ("megatron/gpt", "launch_training, local launcher (torchrun)"),
    "megatron_corpus_direct": (
        "megatron/gpt",
        "entrypoint started directly, `--recompute selective`, `--data`",
    ),
    "ds_zero2_direct": ("deepspeed/zero3", "entrypoint started directly, `--zero-stage 2`"),
    "ds_zero3_direct": ("deepspeed/zero3", "entrypoint started directly, `--zero-stage 3`"),
    "hf_direct": ("hf/finetune", "entrypoint started directly, LoRA rank 16 on every projection"),
    "jax_direct": ("jax/llama", "entrypoint started directly"),
    "fsdp_launched": ("pytorch/fsdp", "launch_training, local launcher (torchrun)"),
    "ds_zero2_launched": ("deepspeed/zero3", "launch_training, local launcher, `--zero-stage 2`"),
    "hf_launched": ("hf/finetune", "launch_training, local launcher, LoRA rank 16 on every projection"),
    "jax_launched": ("jax/llama", "launch_training, local launcher"),
}
# The runs of the first side-by-side part, collected when a call names none.
DEFAULT_RUNS = ("fsdp_direct", "titan_direct", "titan_launched", "megatron_direct", "megatron_launched")
BASE_RUN = "fsdp_direct"
SUMMARY_KEYS = (
    "testcase", "steps", "first_loss", "final_loss", "tokens_per_s", "tflops_per_gpu", "mfu", "peak_mem_gb",
    "elapsed_s", "params", "trainable_params", "flops_per_token", "peak_tflops", "compile", "precision",
    "torch", "gpu_model", "torchtitan", "megatron_core", "layer_spec", "optional_kernels", "recompute",
    "deepspeed", "zero_stage", "jit_ops", "transformers", "accelerate", "peft", "lora_rank",
    "eval_loss_before", "eval_loss", "jax", "attention", "torch_version", "torch_accepted",
)  # fmt: skip


def collect_testcases(directory: Path, names: tuple[str, ...] = DEFAULT_RUNS) -> dict[str, Any]:
    """One JSON from the named runs' summaries and the checks beside them; a missing run is recorded as such.

    Every run is compared with ``fsdp_direct`` (``<run>_vs_fsdp``), and a launched run with the same case
    started directly (``<case>_launch_path_cost``), so one call's JSON holds the ratios the docs quote.
    """
    runs = []
    for name in names:
        testcase, how = TESTCASE_RUNS[name]
        path = directory / f"{name}.json"
        row: dict[str, Any] = {"name": name, "testcase": testcase, "started_by": how, "ok": path.is_file()}
        if path.is_file():
            summary = json.loads(path.read_text(encoding="utf-8"))
            row.update({key: summary[key] for key in SUMMARY_KEYS if key in summary})
        runs.append(row)
    rates = {row["name"]: row.get("tokens_per_s") for row in runs}
    document: dict[str, Any] = {
        "benchmark": "testcases_side_by_side",
        "date_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "runs": runs,
    }
    for name, rate in rates.items():
        case = name.rsplit("_", 1)[0]
        if name.endswith("_direct") and name != BASE_RUN:
            document[f"{case}_vs_fsdp"] = _ratio(rate, rates.get(BASE_RUN))
        if name.endswith("_launched"):
            document[f"{case}_launch_path_cost"] = _cost(rates.get(f"{case}_direct"), rate)
    for key, file in (("parity", "parity.json"), ("megatron_parity", "megatron_parity.json")):
        if (directory / file).is_file():
            document[key] = json.loads((directory / file).read_text(encoding="utf-8"))
    document["resume"] = resume_check(directory)
    return document


def _cost(direct: float | None, launched: float | None) -> float | None:
    """The launch path's share of the direct run's tokens/s (negative: the launched run was faster)."""
    return 1 - launched / direct if direct and launched else None


def resume_check(directory: Path) -> dict[str, Any] | None:
    """The uninterrupted run's losses against the stopped one's and the resumed one's, step by step.

    ``resume_whole.json`` ran every step; ``resume_head.json`` stopped after its checkpoint and
    ``resume_tail.json`` resumed from it. None when any of the three is missing.
    """
    runs = {}
    for part in ("whole", "head", "tail"):
        path = directory / f"resume_{part}.json"
        if not path.is_file():
            return None
        runs[part] = json.loads(path.read_text(encoding="utf-8"))
    whole = runs["whole"]["losses"]
    pieces = runs["head"]["losses"] + runs["tail"]["losses"]
    diffs = [abs(a - b) for a, b in zip(whole, pieces, strict=False)]
    return {
        "testcase": runs["tail"].get("testcase"),
        "resumed_from_step": runs["tail"].get("resumed_from_step"),
        "distributed_optimizer": runs["tail"].get("distributed_optimizer"),
        "whole_losses": whole,
        "stopped_and_resumed_losses": pieces,
        "max_abs_diff": max(diffs) if diffs else None,
        "same_length": len(whole) == len(pieces),
    }


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator`` when both were measured."""
    return numerator / denominator if numerator and denominator else None


def testcases_table(document: dict[str, Any]) -> str:
    """Markdown: each run's throughput and losses, then the launch path's cost and the first-loss parity."""
    lines = [
        "| test case | started by | tokens/s | TFLOP/s | MFU | first loss | final loss | peak memory |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in document["runs"]:
        if not row["ok"] or row.get("tokens_per_s") is None:
            lines.append(f"| `{row['testcase']}` | {row['started_by']} | no result | | | | | |")
            continue
        lines.append(
            f"| `{row['testcase']}` | {row['started_by']} | {row['tokens_per_s']:,.0f} | "
            f"{row['tflops_per_gpu']:.1f} | {100 * (row['mfu'] or 0):.1f} % | {row['first_loss']:.4f} | "
            f"{row['final_loss']:.4f} | {row['peak_mem_gb'] or 0:.1f} GB |"
        )
    notes = []
    labels = {row["name"].rsplit("_", 1)[0]: _run_label(row) for row in document["runs"]}
    for case, label in labels.items():
        ratio = document.get(f"{case}_vs_fsdp")
        if ratio is not None:
            notes.append(f"{label} against pytorch/fsdp: {ratio:.3f}x tokens/s")
    for case, label in labels.items():
        # Files written before every case had its own key name torchtitan's `launch_path_cost`.
        legacy = document.get("launch_path_cost") if case == "titan" else None
        cost = document.get(f"{case}_launch_path_cost", legacy)
        if cost is not None:
            notes.append(f"{label}'s launch path's cost: {100 * cost:.1f} % of tokens/s")
    parity = document.get("parity")
    if parity:
        losses = parity["first_loss"]
        notes.append(
            "first-step loss on the same weights and batch (fp32): "
            f"pytorch/fsdp {losses['pytorch_fsdp']:.6f}, "
            f"torchtitan/llama {losses['torchtitan_llama']:.6f}, difference {parity['abs_diff']:.2e} "
            f"(tolerance {parity['tolerance']:.0e})"
        )
    notes += _megatron_notes(document)
    return "\n".join(lines + ([""] + [f"{note}." for note in notes] if notes else []))


def _run_label(row: dict[str, Any]) -> str:
    """A run's name in the notes: its test case, with the setting that tells two runs of one case apart."""
    stage = row["name"].removeprefix("ds_zero").removesuffix("_direct")
    return f"{row['testcase']} ZeRO-{stage}" if row["name"].startswith("ds_zero") else row["testcase"]


def _megatron_notes(document: dict[str, Any]) -> list[str]:
    """megatron/gpt's first-step losses on pytorch/fsdp's weights, and its resume against the whole run."""
    notes = []
    for dtype, row in ((document.get("megatron_parity") or {}).get("first_loss") or {}).items():
        notes.append(
            f"first-step loss on the same weights and batch ({dtype}): "
            f"pytorch/fsdp {row['pytorch_fsdp']:.6f}, megatron/gpt {row['megatron_gpt']:.6f}, "
            f"difference {row['abs_diff']:.2e} "
            f"({row['tolerance_kind']} tolerance {row['tolerance']:.2e})"
        )
    resume = document.get("resume") or document.get("megatron_resume")
    if resume:
        how = (
            ""
            if resume.get("distributed_optimizer") is None
            else (f" (distributed optimizer {resume['distributed_optimizer']})")
        )
        notes.append(
            f"{resume.get('testcase') or 'megatron/gpt'} resumed at step {resume['resumed_from_step']}{how}: "
            f"largest loss difference from the uninterrupted run {resume['max_abs_diff']:.2e}"
        )
    return notes


def main(argv: list[str]) -> int:
    """``table JSON``: the Markdown; ``plot JSON PNG``: the figure; ``energy JSON CSV``: JSON on stdout."""
    usage = {"table": 2, "plot": 3, "energy": 3, "testcases": 2, "testcases-collect": 3}
    wanted = usage.get(argv[0], 0) if argv else 0
    if not wanted or len(argv) < wanted or (len(argv) > wanted and argv[0] != "testcases-collect"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "testcases-collect":
        unknown = sorted(set(argv[3:]) - set(TESTCASE_RUNS))
        if unknown:
            print(f"unknown runs {unknown}; known: {sorted(TESTCASE_RUNS)}", file=sys.stderr)
            return 2
        document = collect_testcases(Path(argv[1]), tuple(argv[3:]) or DEFAULT_RUNS)
        Path(argv[2]).write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        print(testcases_table(document))
        return 0
    document = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    if argv[0] == "table":
        print(table(document))
    elif argv[0] == "testcases":
        print(testcases_table(document))
    elif argv[0] == "plot":
        plot(document, Path(argv[2]))
    else:
        offset = document.get("environment", {}).get("utc_offset_s", 0)
        samples = power_samples(Path(argv[2]).read_text(encoding="utf-8"), offset)
        print(json.dumps(energy(document, samples), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
