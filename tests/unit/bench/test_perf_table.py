"""bench/perf_table.py: docs/performance.md's current comparison is the newest committed JSON, rendered."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench import perf_table, train_report

ROOT = Path(__file__).resolve().parents[3]

DOC = ROOT / "docs" / "performance.md"


def _row(name: str, tokens: float | None) -> dict[str, object]:
    if tokens is None:
        return {"name": name, "ok": False, "error": "OutOfMemoryError", "batch_size": 8}
    return {
        "name": name,
        "ok": True,
        "batch_size": 8,
        "tokens_per_s": tokens,
        "tflops_per_gpu": tokens * 8e6 / 1e12,
        "mfu": tokens * 8e6 / 1e12 / 989.4,
        "step_time_median_s": 16384 / tokens,
        "peak_mem_gb": 40.0,
    }


def _run(directory: Path, name: str, date: str, rows: list[dict[str, object]], **extra: object) -> None:
    document = {
        "benchmark": "train_throughput",
        "date_utc": date,
        "complete": True,
        "environment": {"torch": "2.11.0+cu130", "cuda": "13.0", "gpu": "NVIDIA H200", "gpus": 1},
        "config": "llama3_2_1b",
        "seq_len": 2048,
        "timed_steps": 10,
        "warmup": 4,
        "peak_tflops": 989.4,
        "results": rows,
        **extra,
    }
    (directory / f"train_throughput_{name}.json").write_text(json.dumps(document), encoding="utf-8")


PAGE = "# Page\n\nbefore\n\n<!-- perf-table:start -->\nold\n<!-- perf-table:end -->\n\nafter\n"


def test_the_docs_block_is_the_newest_json_rendered() -> None:
    """The committed page holds exactly what the committed JSON renders (python3 -m bench.perf_table)."""
    text = DOC.read_text(encoding="utf-8")
    assert perf_table.replace_block(text, perf_table.render()) == text, "run: python3 -m bench.perf_table"


def test_check_fails_on_a_table_edited_by_hand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "performance.md"
    page.write_text(DOC.read_text(encoding="utf-8"), encoding="utf-8")
    assert perf_table.main(["--check", "--doc", str(page)]) == 0
    block = page.read_text(encoding="utf-8").split(perf_table.START)[1]
    figure = re.search(r"\| \*\*ours\*\* [^|]*\| ([\d,]+) \|", block)
    assert figure is not None, "the block has no row of ours"
    page.write_text(page.read_text(encoding="utf-8").replace(figure.group(0), "| **ours** | 99,999 |", 1))
    assert perf_table.main(["--check", "--doc", str(page)]) == 1
    assert "is stale" in capsys.readouterr().err
    assert perf_table.main(["--doc", str(page)]) == 0  # rewriting restores it
    assert page.read_text(encoding="utf-8") == DOC.read_text(encoding="utf-8")


def test_the_newest_run_with_a_baseline_is_shown(tmp_path: Path) -> None:
    _run(tmp_path, "old", "2026-12-01T10:00:00Z", [_row("titan", 60_000), _row("ours", 66_000)])
    _run(tmp_path, "new", "2026-12-03T10:00:00Z", [_row("titan", 62_000), _row("ours", 65_100)])
    # Newer, but without a baseline (an ablation of ours alone): not a comparison.
    _run(tmp_path, "ablation", "2026-12-04T10:00:00Z", [_row("ours", 70_000), _row("ours_expand", 69_000)])
    # Newer, but not complete.
    _run(tmp_path, "cut", "2026-12-05T10:00:00Z", [_row("titan", 1), _row("ours", 2)], complete=False)
    run = perf_table.latest(perf_table.comparisons(tmp_path), "llama3_2_1b")
    assert run is not None and run.path.name == "train_throughput_new.json"
    assert run.ratio() == pytest.approx(65_100 / 62_000)
    block = perf_table.render(tmp_path)
    assert "train_throughput_new.json`, run of 2026-12-03 (UTC)" in block
    assert "ours against it: `ours` 1.05x." in block
    assert "train_throughput_old.json" not in block and "ablation" not in block


def test_a_failed_baseline_is_listed_not_chosen(tmp_path: Path) -> None:
    rows = [_row("hf_eager", None), _row("titan", 50_000), _row("ours", 55_000)]
    _run(tmp_path, "b16", "2026-12-03T10:00:00Z", rows)
    block = perf_table.render(tmp_path)
    assert "| Hugging Face eager, autocast bf16, AdamW foreach | failed: OutOfMemoryError |" in block
    assert "Strongest baseline in this run: torchtitan" in block


def test_the_energy_of_the_same_run_is_added_when_present(tmp_path: Path) -> None:
    _run(tmp_path, "x", "2026-12-03T10:00:00Z", [_row("titan", 60_000), _row("ours", 63_000)])
    energy = {
        "titan": {"mean_power_w": 690.0, "tokens_per_joule": 87.0},
        "ours": {"mean_power_w": 692.0, "tokens_per_joule": 91.04},
    }
    (tmp_path / "train_energy_x.json").write_text(json.dumps(energy), encoding="utf-8")
    assert "`titan` 87.0, `ours` 91.0; every variant at 690-692 W." in perf_table.render(tmp_path)


def test_rewriting_touches_only_the_block() -> None:
    out = perf_table.replace_block(PAGE, "new")
    assert out == PAGE.replace("\nold\n", "\nnew\n")
    assert perf_table.replace_block(out, "new") == out


@pytest.mark.parametrize(
    "page",
    [
        "no markers at all\n",
        PAGE + "<!-- perf-table:start -->\n",
        "<!-- perf-table:end -->\n<!-- perf-table:start -->\n",
    ],
)
def test_a_page_without_one_pair_of_markers_is_refused(page: str) -> None:
    with pytest.raises(ValueError, match="perf-table"):
        perf_table.replace_block(page, "new")


def test_no_comparison_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no complete train_throughput JSON"):
        perf_table.render(tmp_path)


def test_readme_quotes_the_newest_ratio_against_the_strongest_baseline() -> None:
    """README's headline ratio is ours against the strongest baseline of the newest 1B run."""
    run = perf_table.latest(perf_table.comparisons(perf_table.RESULTS), "llama3_2_1b")
    assert run is not None
    ratio = run.ratio()
    assert ratio is not None
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"{ratio:.2f}x" in readme, f"README.md should quote {ratio:.2f}x against the strongest baseline"


@pytest.mark.parametrize(
    ("result", "report"),
    [
        ("train_throughput_llama3_2_1b.json", "2026-12-01-1b-batch8-baselines.md"),
        ("train_throughput_llama3_2_1b_fp8_head.json", "2026-12-02-fp8-head.md"),
        ("train_throughput_llama3_1_8b_side_by_side.json", "2026-12-02-llama3-8b-beside-torchtitan.md"),
        ("train_throughput_llama3_2_1b_b16.json", "2026-12-03-1b-batch16.md"),
        ("train_throughput_llama3_1_8b_ac.json", "2026-12-03-llama3-8b-best-fit.md"),
        ("train_throughput_llama3_2_1b_b16_gqa.json", "2026-12-03-1b-batch16-gqa.md"),
    ],
)
def test_a_report_s_comparison_is_its_json_rendered(result: str, report: str) -> None:
    """The dated reports keep the tables the page showed; each is still its committed JSON, rendered."""
    document = json.loads((perf_table.RESULTS / result).read_text(encoding="utf-8"))
    text = (ROOT / "bench" / "reports" / report).read_text(encoding="utf-8")
    assert train_report.table(document) in text
