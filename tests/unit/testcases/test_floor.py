"""The step floor's GEMM list and arithmetic, checked on CPU against the model the test cases train (here, not
under tests/unit/bench: it imports torch, which cannot share a process with Ansible)."""

from __future__ import annotations

import pytest
import torch
from trainstack_train.config import MODEL_CONFIGS
from trainstack_train.model import Transformer

from bench import floor, train_report


@pytest.mark.parametrize("config", ["tiny", "small", "llama3_2_1b"])
def test_the_gemms_are_every_linear_forward_and_backward(config: str) -> None:
    # Forward and both backward products of every linear weight cost 6 FLOPs per weight per token: the list
    # must add up to exactly that for the real model (the embedding is a lookup; a tied head is a GEMM).
    cfg = MODEL_CONFIGS[config]
    with torch.device("meta"):
        model = Transformer(cfg)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    tokens = 3 * 128
    gemms = floor.step_gemms(cfg, tokens)
    assert sum(g.flops for g in gemms) == 6 * linear * tokens
    assert len({g.name for g in gemms}) == len(gemms) == 18


def test_the_floor_is_each_gemm_times_its_count_plus_attention_per_layer() -> None:
    cfg = MODEL_CONFIGS["tiny"]
    gemms = floor.step_gemms(cfg, 64)
    times = {g.name: 1.0 for g in gemms}
    times["output.fwd"] = 5.0
    result = floor.summary(gemms, times, attention_ms_per_layer=2.0, n_layers=cfg.n_layers)
    block_gemms = 15 * cfg.n_layers
    assert result["gemm_ms"] == block_gemms + 5.0 + 2.0
    assert result["attention_ms"] == 2.0 * cfg.n_layers
    assert result["floor_ms"] == result["gemm_ms"] + result["attention_ms"]


def test_rows_are_set_against_the_floor_only_at_its_batch() -> None:
    rows = [
        {"name": "ours", "ok": True, "batch_size": 16, "step_time_median_s": 0.5},
        {"name": "titan", "ok": True, "batch_size": 8, "step_time_median_s": 0.3},
        {"name": "hf_eager", "ok": False, "batch_size": 16},
    ]
    shares = floor.against_floor(rows, {"floor_ms": 400.0}, batch_size=16)
    assert shares == {"ours": {"step_ms": 500.0, "floor_fraction": 0.8, "outside_floor_ms": 100.0}}
    assert floor.against_floor(rows, {"ok": False}, batch_size=16) == {}


def test_the_report_names_the_floor_and_each_share() -> None:
    document = {
        "results": [],
        "floor_probe": {
            "ok": True,
            "gemm_ms": 350.0,
            "attention_ms": 44.0,
            "floor_ms": 394.0,
            "replay_ms": 414.0,
            "clocks": {"sm_clock_mhz_median": 1755.0},
        },
        "against_floor": {"ours": {"floor_fraction": 0.853}},
    }
    text = "\n".join(train_report.floor_lines(document))
    assert "394.0 ms" in text and "1755 MHz" in text and "`ours` 85 %" in text
    assert train_report.floor_lines({"floor_probe": {"ok": False}}) == []


def test_a_profiled_step_splits_into_the_floors_parts_and_names_the_one_holding_it_back() -> None:
    # 500 ms step: GEMM 360 (10 over a 350 floor), attention 50 (6 over 44), other kernels 70, so the rest
    # (step less GEMM and attention) is 90 ms with 20 ms of idle GPU: the rest holds the step back.
    profile = {
        "by_category_ms": {"matmul": 360.0, "attention": 50.0, "triton_fused": 45.0, "optimizer": 25.0}
    }
    probe = {"gemm_ms": 350.0, "attention_ms": 44.0, "floor_ms": 394.0}
    parts = floor.step_parts(500.0, profile, probe)
    assert parts["gemm_ms"] == 360.0 and parts["attention_ms"] == 50.0
    assert parts["rest_ms"] == 90.0 and parts["rest_gpu_idle_ms"] == 20.0
    assert parts["rest_kernels_ms"] == {"triton_fused": 45.0, "optimizer": 25.0}
    assert parts["over_floor_ms"] == {"gemm": 10.0, "attention": 6.0, "rest": 90.0}
    assert parts["held_back_by"] == "rest"
    # GEMMs far off their floor are named instead.
    slow_gemm = floor.step_parts(600.0, {"by_category_ms": {"matmul": 500.0, "attention": 44.0}}, probe)
    assert slow_gemm["held_back_by"] == "gemm" and slow_gemm["rest_gpu_idle_ms"] == 56.0


def test_only_profiled_rows_carry_parts_and_the_report_prints_them() -> None:
    rows = [
        {
            "name": "ours",
            "ok": True,
            "batch_size": 16,
            "step_time_median_s": 0.5,
            "profile": {"by_category_ms": {"matmul": 360.0, "attention": 50.0, "other": 30.0}},
        },
        {"name": "titan", "ok": True, "batch_size": 16, "step_time_median_s": 0.6},
    ]
    probe = {"ok": True, "gemm_ms": 350.0, "attention_ms": 44.0, "floor_ms": 394.0, "replay_ms": 410.0}
    shares = floor.against_floor(rows, probe, batch_size=16)
    assert "parts" in shares["ours"] and "parts" not in shares["titan"]
    text = "\n".join(train_report.floor_lines({"floor_probe": probe, "against_floor": shares}))
    assert "`ours`: GEMM 360.0 ms (+10.0 over its floor)" in text and "held back by rest" in text
