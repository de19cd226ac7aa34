"""Configuration as dataclasses, parsed from ``--key value`` arguments.

The launcher passes every argument as ``--key value`` (booleans as ``true``/``false``), so the parser accepts
exactly that form and rejects unknown keys by name before any process group is created.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a Llama-3 decoder; FFN width follows Meta's ``multiple_of``/``ffn_dim_multiplier`` rule."""

    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    ffn_dim: int
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    rope_scaling: dict[str, float] | None = None
    max_seq_len: int = 8192
    tie_embeddings: bool = False

    @property
    def head_dim(self) -> int:
        """Per-head width; every Llama-3 shape uses dim / n_heads."""
        return self.dim // self.n_heads

    def validate(self) -> None:
        """Fail early with the offending field named, instead of a shape error deep in a matmul."""
        if self.dim % self.n_heads:
            raise ValueError(f"model.dim ({self.dim}) must be divisible by model.n_heads ({self.n_heads})")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"model.n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(f"model head_dim ({self.head_dim}) must be even for rotary embeddings")


# Llama 3.1/3.2 long-context RoPE rescaling, as published with the weights (rope_type "llama3").
LLAMA3_ROPE_SCALING: dict[str, float] = {
    "factor": 32.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192.0,
}
LLAMA31_ROPE_SCALING: dict[str, float] = {**LLAMA3_ROPE_SCALING, "factor": 8.0}

MODEL_CONFIGS: dict[str, ModelConfig] = {
    # Byte-level vocabulary (256 bytes + BOS/EOS, padded to 512): runs on CPU with gloo in seconds.
    "tiny": ModelConfig(
        dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=512, ffn_dim=192, max_seq_len=1024
    ),
    "small": ModelConfig(
        dim=256, n_layers=4, n_heads=8, n_kv_heads=4, vocab_size=512, ffn_dim=768, max_seq_len=2048
    ),
    "llama3_2_1b": ModelConfig(
        dim=2048,
        n_layers=16,
        n_heads=32,
        n_kv_heads=8,
        vocab_size=128256,
        ffn_dim=8192,
        rope_scaling=LLAMA3_ROPE_SCALING,
        max_seq_len=131072,
        tie_embeddings=True,
    ),
    "llama3_1_8b": ModelConfig(
        dim=4096,
        n_layers=32,
        n_heads=32,
        n_kv_heads=8,
        vocab_size=128256,
        ffn_dim=14336,
        rope_scaling=LLAMA31_ROPE_SCALING,
        max_seq_len=131072,
    ),
    "llama3_70b": ModelConfig(
        dim=8192,
        n_layers=80,
        n_heads=64,
        n_kv_heads=8,
        vocab_size=128256,
        ffn_dim=28672,
        rope_scaling=LLAMA31_ROPE_SCALING,
        max_seq_len=131072,
    ),
}

AC_MODES = ("none", "selective", "full")
ATTN_BACKENDS = ("auto", "flash", "cudnn", "efficient", "math")
# coordinate: Inductor times neighbouring block sizes of every generated kernel once (longer compile);
# max-autotune: also times Triton GEMM templates, with their fused epilogues, against cuBLAS (much longer).
COMPILE_TUNINGS = ("default", "coordinate", "max-autotune")
# The loss's per-chunk kernels (fsdp_llama.loss). auto: the Triton kernel on CUDA, else the compiled torch
# reference when compiling, else the plain one.
LOSS_KERNELS = ("eager", "compiled", "triton")
LOSS_KERNEL_CHOICES = ("auto", *LOSS_KERNELS)
# The GPU's dense BF16 peak in TFLOP/s (the MFU denominator) when --peak-tflops is not given. The launcher
# sets it from the instance catalog of the collection that stages this payload (which keeps no GPU table).
PEAK_ENV = "TRAINSTACK_GPU_PEAK_TFLOPS"
# Compute precision of the blocks' matrix products: bf16, or float8 through torchao (fsdp_llama.fp8) with
# tensorwise or rowwise scaling; every other part keeps the bf16/fp32 numerics either way.
PRECISIONS = ("bf16", "fp8")
FP8_RECIPES = ("tensorwise", "rowwise")


@dataclass
class TrainConfig:
    """Everything one run needs; defaults are the tiny CPU smoke run the lab demo launches."""

    config: str = "tiny"
    steps: int = 20
    batch_size: int = 8
    seq_len: int = 128
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 2
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    seed: int = 1234
    data: str = "synthetic"
    device: str = "auto"
    mixed_precision: str = "auto"
    precision: str = "bf16"
    fp8_recipe: str = "tensorwise"
    master_dtype: str = "fp32"
    reshard_after_forward: str = "auto"
    fsdp: str = "auto"
    compile: str = "auto"
    compile_tuning: str = "default"
    ac: str = "none"
    attn_backend: str = "auto"
    loss_chunk_tokens: int = 4096
    loss_kernel: str = "auto"
    checkpoint_dir: str = ""
    checkpoint_every: int = 0
    summary_json: str = ""
    metric_warmup_steps: int = 3
    max_steps_this_run: int = 0
    peak_tflops: float | None = None

    @property
    def model(self) -> ModelConfig:
        """The named shape; unknown names were already rejected by :meth:`validate`."""
        return MODEL_CONFIGS[self.config]

    def validate(self) -> None:
        """Reject bad values with the CLI option named, before a process group or a model exists."""
        if self.config not in MODEL_CONFIGS:
            raise ValueError(f"--config {self.config!r} is unknown; choose one of {sorted(MODEL_CONFIGS)}")
        checks: list[tuple[bool, str]] = [
            (self.steps >= 1, f"--steps must be >= 1, got {self.steps}"),
            (self.batch_size >= 1, f"--batch-size must be >= 1, got {self.batch_size}"),
            (self.seq_len >= 2, f"--seq-len must be >= 2, got {self.seq_len}"),
            (self.lr > 0, f"--lr must be > 0, got {self.lr}"),
            (0 <= self.min_lr_ratio <= 1, f"--min-lr-ratio must be in [0, 1], got {self.min_lr_ratio}"),
            (self.warmup_steps >= 0, f"--warmup-steps must be >= 0, got {self.warmup_steps}"),
            (self.checkpoint_every >= 0, f"--checkpoint-every must be >= 0, got {self.checkpoint_every}"),
            (self.loss_chunk_tokens >= 1, f"--loss-chunk-tokens must be >= 1, got {self.loss_chunk_tokens}"),
            (
                self.loss_kernel in LOSS_KERNEL_CHOICES,
                f"--loss-kernel must be one of {LOSS_KERNEL_CHOICES}, got {self.loss_kernel!r}",
            ),
            (self.ac in AC_MODES, f"--ac must be one of {AC_MODES}, got {self.ac!r}"),
            (self.attn_backend in ATTN_BACKENDS, f"--attn-backend must be one of {ATTN_BACKENDS}"),
            (self.device in ("auto", "cpu", "cuda"), f"--device must be auto, cpu or cuda: {self.device!r}"),
            (
                self.mixed_precision in ("auto", "bf16", "fp32"),
                f"--mixed-precision must be auto, bf16 or fp32, got {self.mixed_precision!r}",
            ),
            (
                self.precision in PRECISIONS,
                f"--precision must be one of {PRECISIONS}, got {self.precision!r}",
            ),
            (
                self.fp8_recipe in FP8_RECIPES,
                f"--fp8-recipe must be one of {FP8_RECIPES}, got {self.fp8_recipe!r}",
            ),
            (
                not (self.precision == "fp8" and self.mixed_precision == "fp32"),
                "--precision fp8 computes around bf16: it cannot be combined with --mixed-precision fp32",
            ),
            (
                self.master_dtype in ("fp32", "bf16"),
                f"--master-dtype must be fp32 or bf16: {self.master_dtype}",
            ),
            (
                self.reshard_after_forward in ("auto", "true", "false"),
                "--reshard-after-forward must be auto, true or false",
            ),
            (self.compile in ("auto", "true", "false"), "--compile must be auto, true or false"),
            (
                self.compile_tuning in COMPILE_TUNINGS,
                f"--compile-tuning must be one of {COMPILE_TUNINGS}, got {self.compile_tuning!r}",
            ),
            (self.fsdp in ("auto", "true", "false"), "--fsdp must be auto, true or false"),
            (
                not (self.checkpoint_every and not self.checkpoint_dir),
                "--checkpoint-every needs --checkpoint-dir",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        if self.peak_tflops is not None and not _positive_finite(self.peak_tflops):
            raise ValueError(f"--peak-tflops must be a finite number > 0, got {self.peak_tflops!r}")
        if self.seq_len > self.model.max_seq_len:
            limit = self.model.max_seq_len
            raise ValueError(f"--seq-len {self.seq_len} exceeds {self.config}'s max_seq_len {limit}")
        self.model.validate()


def _bool_word(value: str) -> str:
    """Normalise the launcher's boolean spelling; keep ``auto`` for fields that allow it."""
    lowered = value.strip().lower()
    aliases = {"1": "true", "yes": "true", "on": "true", "0": "false", "no": "false", "off": "false"}
    return aliases.get(lowered, lowered)


def _positive_finite(value: object) -> bool:
    """A peak of 0, a negative, inf or nan would turn MFU into a number that means nothing."""
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def peak_from(given: str | None, environ: Mapping[str, str]) -> float | None:
    """The dense BF16 peak per GPU in TFLOP/s: ``--peak-tflops``, else :data:`PEAK_ENV`, else None (unknown).

    Why no table of GPU names here: the instance catalog is the one place that fact is kept, and matching a
    device name against a second table is how the two drifted. An empty variable counts as unset.
    """
    source, text = "--peak-tflops", given
    if given is None:
        source, text = f"{PEAK_ENV} (the default of --peak-tflops)", environ.get(PEAK_ENV, "").strip()
        if not text:
            return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not _positive_finite(value):
        raise ValueError(f"{source} must be a finite number > 0 (dense BF16 TFLOP/s per GPU), got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """One ``--kebab-case`` option per :class:`TrainConfig` field, typed from the field's default."""
    parser = argparse.ArgumentParser(description="trainstack pytorch/fsdp: Llama decoder with FSDP2")
    for f in dataclasses.fields(TrainConfig):
        default = getattr(TrainConfig(), f.name)
        kind = type(default)
        option = "--" + f.name.replace("_", "-")
        if f.name == "peak_tflops":
            # Read as text and checked by peak_from, so the message names the option or the variable.
            parser.add_argument(
                option, default=None, metavar="TFLOPS", help=f"dense BF16 peak per GPU ({PEAK_ENV})"
            )
        elif f.name in ("compile", "reshard_after_forward", "fsdp"):
            parser.add_argument(option, type=_bool_word, default=default)
        else:
            parser.add_argument(option, type=kind, default=default)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> TrainConfig:
    """Parse and validate; argparse itself names an unknown option and exits with status 2."""
    namespace = build_parser().parse_args(argv)
    try:
        namespace.peak_tflops = peak_from(namespace.peak_tflops, os.environ)
        cfg = TrainConfig(**vars(namespace))
        cfg.validate()
    except ValueError as err:
        build_parser().error(str(err))
    return cfg
