"""Arguments of ``deepspeed/zero3``, the rules between them and DeepSpeed's config, checked without torch.

Why no torch here: the launcher reads ``--help`` and runs ``--validate-only`` on the submit host before it
submits anything, so both must answer in a fraction of a second and must not need a GPU, torch or DeepSpeed.
The DeepSpeed config (a plain dict) is written here too, so what a run will ask of DeepSpeed is tested
without it. The shapes are ``pytorch/fsdp``'s (``fsdp_llama.config.MODEL_CONFIGS``).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fsdp_llama.config import MODEL_CONFIGS, PEAK_ENV, ModelConfig, peak_from

# The shapes this case offers: pytorch/fsdp's tiny one and the two Llama-3 shapes measured on GPUs.
CONFIGS = ("tiny", "llama3_2_1b", "llama3_1_8b")
# 0: plain data parallel; 1: optimizer state partitioned; 2: and gradients; 3: and parameters.
ZERO_STAGES = (0, 1, 2, 3)
OFFLOAD = ("none", "cpu")
# torch: torch.optim.AdamW (fused on CUDA) handed to DeepSpeed, nothing compiled at run time.
# deepspeed: DeepSpeed's own AdamW from its config, which DeepSpeed JIT-compiles on first use (FusedAdam on
# CUDA; DeepSpeedCPUAdam, C++, when the optimizer state is offloaded to the CPU or the device is the CPU).
OPTIMIZERS = ("torch", "deepspeed")
MIXED_PRECISION = ("auto", "bf16", "fp32")
AC_MODES = ("none", "selective", "full")
DEVICES = ("auto", "cpu", "cuda")
BOOLEAN = ("true", "false")
BETAS = (0.9, 0.95)


@dataclass
class TrainConfig:
    """One run; the defaults are the tiny run the manifest launches (ZeRO-3, CPU or GPU)."""

    config: str = "tiny"
    steps: int = 20
    batch_size: int = 8
    seq_len: int = 128
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 2
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 1234
    data: str = "synthetic"
    device: str = "auto"
    zero_stage: int = 3
    offload_optimizer: str = "none"
    offload_param: str = "none"
    optimizer: str = "torch"
    mixed_precision: str = "auto"
    ac: str = "none"
    checkpoint_dir: str = ""
    checkpoint_every: int = 0
    summary_json: str = ""
    metric_warmup_steps: int = 3
    max_steps_this_run: int = 0
    peak_tflops: float | None = None
    validate_only: str = "false"

    @property
    def model(self) -> ModelConfig:
        """The named shape (validated first)."""
        return MODEL_CONFIGS[self.config]

    def validate(self) -> None:
        """Each rule with the option it constrains named; the first one broken is raised."""
        if self.config not in CONFIGS:
            raise ValueError(f"--config {self.config!r} is unknown; choose one of {list(CONFIGS)}")
        for ok, message in (*self._value_rules(), *self._zero_rules()):
            if not ok:
                raise ValueError(message)

    def _value_rules(self) -> list[tuple[bool, str]]:
        return [
            (self.steps >= 1, f"--steps must be >= 1, got {self.steps}"),
            (self.batch_size >= 1, f"--batch-size must be >= 1, got {self.batch_size}"),
            (self.seq_len >= 2, f"--seq-len must be >= 2, got {self.seq_len}"),
            (
                self.seq_len <= self.model.max_seq_len,
                f"--seq-len {self.seq_len} exceeds {self.config}'s max_seq_len {self.model.max_seq_len}",
            ),
            (self.lr > 0, f"--lr must be > 0, got {self.lr}"),
            (0 <= self.min_lr_ratio <= 1, f"--min-lr-ratio must be in [0, 1], got {self.min_lr_ratio}"),
            (self.warmup_steps >= 0, f"--warmup-steps must be >= 0, got {self.warmup_steps}"),
            (self.weight_decay >= 0, f"--weight-decay must be >= 0, got {self.weight_decay}"),
            (self.grad_clip > 0, f"--grad-clip must be > 0, got {self.grad_clip}"),
            (self.device in DEVICES, f"--device must be one of {DEVICES}, got {self.device!r}"),
            (
                self.mixed_precision in MIXED_PRECISION,
                f"--mixed-precision must be one of {MIXED_PRECISION}, got {self.mixed_precision!r}",
            ),
            (self.ac in AC_MODES, f"--ac must be one of {AC_MODES}, got {self.ac!r}"),
            (
                self.optimizer in OPTIMIZERS,
                f"--optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}",
            ),
            (self.checkpoint_every >= 0, f"--checkpoint-every must be >= 0, got {self.checkpoint_every}"),
            (
                not (self.checkpoint_every and not self.checkpoint_dir),
                "--checkpoint-every needs --checkpoint-dir",
            ),
            (
                self.max_steps_this_run >= 0,
                f"--max-steps-this-run must be >= 0, got {self.max_steps_this_run}",
            ),
            (self.validate_only in BOOLEAN, "--validate-only must be true or false"),
        ]

    def _zero_rules(self) -> list[tuple[bool, str]]:
        """DeepSpeed's own constraints between the ZeRO stage and offloading, stated before submission."""
        stage = self.zero_stage
        return [
            (
                stage in ZERO_STAGES,
                f"--zero-stage {stage} is not a ZeRO stage: DeepSpeed has 0 (off), 1 (optimizer state "
                "partitioned), 2 (and gradients) and 3 (and parameters)",
            ),
            (
                self.offload_optimizer in OFFLOAD,
                f"--offload-optimizer must be one of {OFFLOAD}, got {self.offload_optimizer!r}",
            ),
            (
                self.offload_param in OFFLOAD,
                f"--offload-param must be one of {OFFLOAD}, got {self.offload_param!r}",
            ),
            (
                self.offload_optimizer == "none" or stage >= 1,
                f"--offload-optimizer cpu needs --zero-stage 1, 2 or 3, got {stage}: ZeRO-Offload moves the "
                "partitioned optimizer state, and stage 0 partitions nothing",
            ),
            (
                self.offload_param == "none" or stage == 3,
                f"--offload-param cpu needs --zero-stage 3, got {stage}: only stage 3 partitions the "
                "parameters",
            ),
            (
                not (self.device == "cpu" and "cpu" in (self.offload_optimizer, self.offload_param)),
                "--offload-optimizer/--offload-param cpu needs an accelerator: on --device cpu everything is "
                "already in host memory",
            ),
        ]

    def uses_bf16(self, device_type: str) -> bool:
        """``auto``: bf16 on a GPU, fp32 on the CPU (as pytorch/fsdp's ``--mixed-precision``)."""
        return self.mixed_precision == "bf16" or (self.mixed_precision == "auto" and device_type == "cuda")


def _zero_section(cfg: TrainConfig) -> dict[str, Any]:
    """DeepSpeed's ``zero_optimization``: the stage, offloading, and communication overlapped with compute."""
    zero: dict[str, Any] = {"stage": cfg.zero_stage}
    if cfg.zero_stage >= 1:
        # Gradients reduced into one contiguous buffer while backward runs (DeepSpeed's recommended settings).
        zero |= {"overlap_comm": True, "contiguous_gradients": True}
    if cfg.offload_optimizer == "cpu":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if cfg.offload_param == "cpu":
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return zero


def deepspeed_config(cfg: TrainConfig, world_size: int, device_type: str) -> dict[str, Any]:
    """The config ``deepspeed.initialize`` gets: batch, precision, ZeRO, clipping and optimizer.

    One micro-batch per step (``--batch-size`` rows per rank). The schedule is handed over built
    (pytorch/fsdp's warm-up and cosine, see :mod:`ds_llama.build`), so both cases' curves compare step for
    step; DeepSpeed's WarmupCosineLR would start two steps at a rate of 0. With ``--optimizer torch`` the
    optimizer is handed over built too, so the config holds none; offloading it then needs
    ``zero_force_ds_cpu_optimizer`` off, DeepSpeed's switch for a client optimizer on the CPU.
    """
    config: dict[str, Any] = {
        "train_batch_size": cfg.batch_size * world_size,
        "train_micro_batch_size_per_gpu": cfg.batch_size,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": cfg.grad_clip,
        "bf16": {"enabled": cfg.uses_bf16(device_type)},
        "zero_optimization": _zero_section(cfg),
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
        "seed": cfg.seed,
    }
    if cfg.optimizer == "deepspeed":
        config["optimizer"] = {
            "type": "AdamW",
            "params": {"lr": cfg.lr, "betas": list(BETAS), "weight_decay": cfg.weight_decay, "eps": 1e-8},
        }
    elif cfg.offload_optimizer == "cpu":
        config["zero_force_ds_cpu_optimizer"] = False
    return config


def _word(value: str) -> str:
    """The launcher's booleans (``True``, ``yes``, ``1``) as ``true``/``false``."""
    lowered = value.strip().lower()
    aliases = {"1": "true", "yes": "true", "on": "true", "0": "false", "no": "false", "off": "false"}
    return aliases.get(lowered, lowered)


def build_parser() -> argparse.ArgumentParser:
    """One ``--kebab-case`` option per field, typed from its default."""
    parser = argparse.ArgumentParser(description="trainstack deepspeed/zero3: DeepSpeed ZeRO on a Llama-3")
    for f in dataclasses.fields(TrainConfig):
        default = getattr(TrainConfig(), f.name)
        option = "--" + f.name.replace("_", "-")
        if f.name == "peak_tflops":
            parser.add_argument(option, default=None, metavar="TFLOPS", help=f"dense BF16 peak ({PEAK_ENV})")
        elif isinstance(default, str):
            parser.add_argument(option, type=_word, default=default)
        else:
            parser.add_argument(option, type=type(default), default=default)
    return parser


def parse_args(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> TrainConfig:
    """Parse and check every rule; a broken one exits with status 2 and its message (argparse's way)."""
    env = os.environ if environ is None else environ
    parser = build_parser()
    namespace = parser.parse_args(argv)
    try:
        namespace.peak_tflops = peak_from(namespace.peak_tflops, env)
        cfg = TrainConfig(**vars(namespace))
        cfg.validate()
    except ValueError as err:
        parser.error(str(err))
    if cfg.peak_tflops is not None and not (math.isfinite(cfg.peak_tflops) and cfg.peak_tflops > 0):
        parser.error(f"--peak-tflops must be a finite number > 0, got {cfg.peak_tflops!r}")
    return cfg
