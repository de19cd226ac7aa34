"""The floor of one training step: every GEMM of the step and its attention, each timed alone, summed.

Why a floor and not a peak: MFU divides by a datasheet figure that no real GEMM mix reaches on a power-capped
card, so "58 % MFU" does not say how much is left to win. The floor is measured on the same GPU, in the same
run, at the clocks the power cap allows: the step's distinct GEMMs (forward, input gradient and weight
gradient of every linear, the output head's three) timed with cuBLAS at steady state, each times the number
of layers that run it, plus causal attention forward and backward with the fastest SDPA backend. A variant's
step against that sum says how much of the step is the work itself and how much is everything else (norms,
rotary, SwiGLU, the loss, the optimizer, copies, host gaps), which is what an optimisation can still remove.

The shapes come from the model config alone (:func:`step_gemms`), so the list is checked on CPU; the timing
runs in ``bench.train_throughput``'s ``floor_probe`` child on the GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Gemm:
    """One GEMM of a step: ``out[m, n] = a[m, k] @ b[k, n]``, run ``count`` times per step."""

    name: str
    m: int
    k: int
    n: int
    count: int

    @property
    def flops(self) -> int:
        """Multiply-adds counted as two FLOPs, for every run of the step."""
        return 2 * self.m * self.k * self.n * self.count


def _linear(name: str, tokens: int, inputs: int, outputs: int, count: int) -> list[Gemm]:
    """A linear's three GEMMs: forward, the gradient of its input and the gradient of its weight."""
    return [
        Gemm(f"{name}.fwd", tokens, inputs, outputs, count),
        Gemm(f"{name}.dgrad", tokens, outputs, inputs, count),
        Gemm(f"{name}.wgrad", outputs, tokens, inputs, count),
    ]


def step_gemms(cfg: Any, tokens: int) -> list[Gemm]:
    """Every GEMM of one forward+backward over ``tokens`` tokens of the Llama decoder in trainstack_train.

    The blocks' q/k/v projection is one fused weight (as the model has it), the SwiGLU gate and up stay two;
    the output head runs once. The embedding is a lookup, not a GEMM.
    """
    qkv = (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim
    layers = cfg.n_layers
    gemms = _linear("wqkv", tokens, cfg.dim, qkv, layers)
    gemms += _linear("wo", tokens, cfg.n_heads * cfg.head_dim, cfg.dim, layers)
    gemms += _linear("w1", tokens, cfg.dim, cfg.ffn_dim, layers)
    gemms += _linear("w3", tokens, cfg.dim, cfg.ffn_dim, layers)
    gemms += _linear("w2", tokens, cfg.ffn_dim, cfg.dim, layers)
    gemms += _linear("output", tokens, cfg.dim, cfg.vocab_size, 1)
    return gemms


def summary(
    gemms: list[Gemm], gemm_ms: Mapping[str, float], attention_ms_per_layer: float, n_layers: int
) -> dict[str, Any]:
    """The floor in ms: each GEMM's time times its count, plus attention for every layer."""
    gemm_total = sum(gemm_ms[g.name] * g.count for g in gemms)
    attention_total = attention_ms_per_layer * n_layers
    flops = sum(g.flops for g in gemms)
    return {
        "gemms": [
            {**asdict(g), "ms": gemm_ms[g.name], "tflops": g.flops / g.count / gemm_ms[g.name] / 1e9}
            for g in gemms
        ],
        "gemm_ms": gemm_total,
        "gemm_tflops": flops / gemm_total / 1e9 if gemm_total else None,
        "attention_ms": attention_total,
        "floor_ms": gemm_total + attention_total,
    }


# The profiler's kernel categories (bench.train_throughput) that are the floor's two parts; every other
# category (norms, rotary and SwiGLU fused by Triton, the optimizer, copies and casts, ...) is "the rest".
FLOOR_PARTS = {"matmul": "gemm", "attention": "attention"}


def step_parts(step_ms: float, profile: Mapping[str, Any], floor: Mapping[str, Any]) -> dict[str, Any]:
    """One variant's step split as the floor is: GEMM kernels, attention kernels and the rest.

    GEMM and attention come from the profiled steps' kernel times; the rest is the timed median step less
    those two, so it holds every other kernel and the time the GPU waits for the host. Each part is set
    against its floor (the rest's floor is zero), and the part with the most time over its floor is named:
    that is what holds the step back.
    """
    by_category = profile.get("by_category_ms") or {}
    gemm = by_category.get("matmul", 0.0)
    attention = by_category.get("attention", 0.0)
    other = {k: v for k, v in by_category.items() if k not in FLOOR_PARTS}
    idle = max(step_ms - gemm - attention - sum(other.values()), 0.0)
    over = {
        "gemm": gemm - floor["gemm_ms"],
        "attention": attention - floor["attention_ms"],
        "rest": step_ms - gemm - attention,
    }
    return {
        "gemm_ms": gemm,
        "attention_ms": attention,
        "rest_ms": over["rest"],
        "rest_kernels_ms": dict(sorted(other.items(), key=lambda item: -item[1])),
        "rest_gpu_idle_ms": idle,
        "over_floor_ms": over,
        "held_back_by": max(over, key=lambda part: over[part]),
    }


def against_floor(results: list[dict[str, Any]], floor: Mapping[str, Any], batch_size: int) -> dict[str, Any]:
    """Each variant's median step beside the floor (at the probe's batch size only: another batch has
    another floor): the floor's share of the step, the ms outside it and, for a profiled variant, its step
    split into the floor's parts (:func:`step_parts`)."""
    floor_ms = floor.get("floor_ms")
    rows: dict[str, Any] = {}
    if not floor_ms:
        return rows
    for row in results:
        if row.get("ok") and row.get("batch_size") == batch_size and row.get("step_time_median_s"):
            step_ms = 1e3 * row["step_time_median_s"]
            rows[row["name"]] = {
                "step_ms": step_ms,
                "floor_fraction": floor_ms / step_ms,
                "outside_floor_ms": step_ms - floor_ms,
            }
            if row.get("profile"):
                rows[row["name"]]["parts"] = step_parts(step_ms, row["profile"], floor)
    return rows
