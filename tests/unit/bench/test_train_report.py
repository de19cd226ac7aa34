"""bench/train_report.py: the strongest baseline, ours' ratio and the docs' table, from a benchmark JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench import perf_table, train_report

ROOT = Path(__file__).resolve().parents[3]


def _row(name: str, tokens: float | None, error: str = "") -> dict[str, object]:
    if tokens is None:
        return {"name": name, "ok": False, "error": error, "batch_size": 8}
    return {
        "name": name,
        "ok": True,
        "tokens_per_s": tokens,
        "tflops_per_gpu": tokens * 8e6 / 1e12,
        "mfu": tokens * 8e6 / 1e12 / 989.4,
        "step_time_median_s": 16384 / tokens,
        "peak_mem_gb": 40.0,
        "step_times_s": [0.3, 0.25, 0.24],
    }


RESULTS = [
    _row("hf_compile", 53_000),
    _row("hf_compile_fused", 55_800),
    _row("hf_liger_compile", None, "TorchRuntimeError: fake tensor | call\nsecond line"),
    _row("titan", 63_600),
    _row("ours", 68_250),
    _row("ours_fp8", 79_000),
]


def test_the_fastest_baseline_that_ran_is_the_strongest() -> None:
    summary = train_report.comparison(RESULTS)
    assert summary["strongest_baseline"] == "titan"
    assert summary["strongest_baseline_tokens_per_s"] == 63_600
    assert summary["ratios"] == {"ours": 68_250 / 63_600, "ours_fp8": 79_000 / 63_600}
    assert list(summary["failed_baselines"]) == ["hf_liger_compile"]


def test_no_baseline_no_ratio() -> None:
    summary = train_report.comparison([_row("ours", 68_000), _row("hf_eager", None, "OOM")])
    assert summary["strongest_baseline"] is None
    assert summary["ratios"] == {}


def test_table_lists_every_row_and_names_the_strongest() -> None:
    text = train_report.table({"results": RESULTS})
    lines = text.splitlines()
    assert len([line for line in lines if line.startswith("| ") and "---" not in line]) == 1 + len(RESULTS)
    assert "| torchtitan Llama-3 (per-block compile, AdamW fused) | 63,600 |" in text
    # A failed row shows its error's first line, with no table-breaking pipe.
    assert "failed: TorchRuntimeError: fake tensor / call |" in text
    assert lines[-1] == (
        "Strongest baseline in this run: torchtitan Llama-3 (per-block compile, AdamW fused); "
        "ours against it: `ours` 1.07x, `ours_fp8` 1.24x."
    )


def test_a_failed_row_shows_its_errors_first_sentence_only() -> None:
    error = (
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 15.66 GiB. GPU 0 has a total capacity of 79"
    )
    text = train_report.table({"results": [_row("hf_fsdp2", None, error), _row("ours", 60_000)]})
    assert "| failed: OutOfMemoryError: CUDA out of memory | | | | |" in text
    assert "Tried to allocate" not in text


@pytest.mark.parametrize("config", ["llama3_2_1b", "llama3_1_8b"])
def test_the_docs_table_is_the_committed_json_rendered(config: str) -> None:
    """docs/performance.md's comparisons are made from the newest committed JSON of each shape, never edited
    by hand (the newest is perf_table's choice, so a new run needs no edit here)."""
    run = perf_table.latest(perf_table.comparisons(ROOT / "bench/results"), config)
    assert run is not None, f"no complete comparison of {config} under bench/results"
    document = run.document
    assert document["complete"] is True
    assert document["comparison"] == train_report.comparison(document["results"])
    assert train_report.table(document) in (ROOT / "docs/performance.md").read_text("utf-8")


CLOCKS = """timestamp, clocks.current.sm [MHz], power.draw [W], temperature.gpu, clocks_event_reasons.active
2026/12/01 22:00:00.000, 1980 MHz, 100.00 W, 40, 0x0
2026/12/01 22:00:01.000, 1500 MHz, 690.00 W, 60, 0x4
2026/12/01 22:00:02.000, 1600 MHz, 700.00 W, 61, 0x4
timestamp, clocks.current.sm [MHz], power.draw [W], temperature.gpu, clocks_event_reasons.active
2026/12/01 22:00:03.000, 1980 MHz, 2"""


def test_energy_is_power_over_the_timed_steps_only() -> None:
    # The machine's clock runs one hour ahead of UTC: the samples' local stamps are shifted back.
    samples = train_report.power_samples(CLOCKS, utc_offset_s=3600)
    assert len(samples) == 3  # the repeated header and the cut-off last line are skipped
    start = samples[1][0]
    row = {**_row("ours", 65_536.0), "batch_size": 8, "timed_window_unix": [start, start + 1.5]}
    late = {**_row("titan", 60_000.0), "batch_size": 8, "timed_window_unix": [start + 100, start + 200]}
    rows = train_report.energy({"seq_len": 2048, "results": [row, late]}, samples)
    assert list(rows) == ["ours"]
    assert rows["ours"]["samples"] == 2
    assert rows["ours"]["mean_power_w"] == 695.0
    assert rows["ours"]["mean_sm_clock_mhz"] == 1550.0
    assert rows["ours"]["joules_per_step"] == 695.0 * 0.25  # 16,384 tokens at 65,536 tokens/s
    assert rows["ours"]["tokens_per_joule"] == 65_536.0 / 695.0
    assert samples[0][0] == datetime(2026, 12, 1, 21, 0, tzinfo=UTC).timestamp()


def _summary(testcase: str, tokens: float, losses: list[float] | None = None) -> dict[str, object]:
    losses = losses or [12.0, 11.0]
    return {
        "testcase": testcase,
        "steps": len(losses),
        "first_loss": losses[0],
        "final_loss": losses[-1],
        "losses": losses,
        "tokens_per_s": tokens,
        "tflops_per_gpu": tokens * 8e6 / 1e12,
        "mfu": tokens * 8e6 / 1e12 / 989.4,
        "peak_mem_gb": 40.0,
        "zero_stage": 2,
    }


def _write(directory: Path, name: str, document: dict[str, object]) -> None:
    (directory / f"{name}.json").write_text(json.dumps(document), encoding="utf-8")


def test_side_by_side_runs_are_compared_with_pytorch_fsdp_and_a_missing_one_kept(tmp_path: Path) -> None:
    _write(tmp_path, "fsdp_direct", _summary("pytorch/fsdp", 68_000))
    _write(tmp_path, "ds_zero2_direct", _summary("deepspeed/zero3", 47_600))
    _write(tmp_path, "megatron_direct", _summary("megatron/gpt", 17_000))
    _write(tmp_path, "megatron_launched", _summary("megatron/gpt", 16_830))
    names = ("fsdp_direct", "ds_zero2_direct", "hf_direct", "megatron_direct", "megatron_launched")
    document = train_report.collect_testcases(tmp_path, names)
    assert [(row["name"], row["ok"]) for row in document["runs"]] == [
        ("fsdp_direct", True), ("ds_zero2_direct", True), ("hf_direct", False),
        ("megatron_direct", True), ("megatron_launched", True),
    ]  # fmt: skip
    assert document["ds_zero2_vs_fsdp"] == 0.7 and document["hf_vs_fsdp"] is None
    assert round(document["megatron_launch_path_cost"], 6) == 0.01
    assert document["runs"][1]["zero_stage"] == 2 and document["resume"] is None
    table = train_report.testcases_table(document)
    hf_row = "| `hf/finetune` | entrypoint started directly, LoRA rank 16 on every projection | no result |"
    assert hf_row in table
    assert "deepspeed/zero3 ZeRO-2 against pytorch/fsdp: 0.700x tokens/s." in table
    assert "megatron/gpt's launch path's cost: 1.0 % of tokens/s." in table


def test_a_resume_is_compared_with_the_uninterrupted_run_step_by_step(tmp_path: Path) -> None:
    _write(tmp_path, "resume_whole", _summary("deepspeed/zero3", 1, [6.0, 5.5, 5.0, 4.6, 4.3, 4.1]))
    _write(tmp_path, "resume_head", _summary("deepspeed/zero3", 1, [6.0, 5.5, 5.0]))
    tail = {**_summary("deepspeed/zero3", 1, [4.6, 4.3, 4.2]), "resumed_from_step": 3}
    _write(tmp_path, "resume_tail", tail)
    resume = train_report.collect_testcases(tmp_path, ())["resume"]
    assert resume["testcase"] == "deepspeed/zero3" and resume["resumed_from_step"] == 3
    assert round(resume["max_abs_diff"], 6) == 0.1 and resume["same_length"]
    note = "deepspeed/zero3 resumed at step 3: largest loss difference from the uninterrupted run 1.00e-01."
    assert note in train_report.testcases_table(train_report.collect_testcases(tmp_path, ()))


def test_collecting_an_unknown_run_is_refused_naming_it(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out.json"
    argv = ["testcases-collect", str(tmp_path), str(out), "fsdp_direct", "zero9_direct"]
    assert train_report.main(argv) == 2
    assert "unknown runs ['zero9_direct']" in capsys.readouterr().err and not out.exists()
