"""Arguments of ``deepspeed/zero3``, the rules between them and DeepSpeed's config, checked without torch.

Why no torch here: the launcher reads ``--help`` and runs ``--validate-only`` on the submit host before it
submits anything, so both must answer in a fraction of a second and must not need a GPU, torch or DeepSpeed.
The DeepSpeed config (a plain dict) is written here too, so what a run will ask of DeepSpeed is tested
without it. The shapes are ``pytorch/fsdp``'s (``trainstack_train.config.MODEL_CONFIGS``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from trainstack_train.config import DEVICES, LlamaRunConfig, Rule

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
BETAS = (0.9, 0.95)


@dataclass
class TrainConfig(LlamaRunConfig):
    """One run; the defaults are the tiny run the manifest launches (ZeRO-3, CPU or GPU)."""

    CONFIGS: ClassVar[tuple[str, ...]] = CONFIGS
    DESCRIPTION: ClassVar[str] = "trainstack deepspeed/zero3: DeepSpeed ZeRO on a Llama-3"

    zero_stage: int = 3
    offload_optimizer: str = "none"
    offload_param: str = "none"
    optimizer: str = "torch"
    mixed_precision: str = "auto"
    ac: str = "none"
    validate_only: str = "false"

    def rule_groups(self, world_size: int, environ: Mapping[str, str]) -> list[Callable[[], Iterable[Rule]]]:
        """The shared rules, this case's values, then DeepSpeed's between the ZeRO stage and offloading."""
        del world_size, environ  # DeepSpeed's rules hold for any number of processes
        return [self.run_rules, self._value_rules, self.checkpoint_rules, self._run_rules, self._zero_rules]

    def _value_rules(self) -> list[Rule]:
        return [
            self.at_least("weight_decay", 0),
            self.clip_rule(),
            self.one_of("device", DEVICES),
            self.one_of("mixed_precision", MIXED_PRECISION),
            self.one_of("ac", AC_MODES),
            self.one_of("optimizer", OPTIMIZERS),
        ]

    def _run_rules(self) -> list[Rule]:
        return [
            self.at_least("max_steps_this_run", 0),
            *self.flag_rules("validate_only"),
        ]

    def _zero_rules(self) -> list[Rule]:
        """DeepSpeed's own constraints between the ZeRO stage and offloading, stated before submission."""
        stage = self.zero_stage
        return [
            (
                stage in ZERO_STAGES,
                f"--zero-stage {stage} is not a ZeRO stage: DeepSpeed has 0 (off), 1 (optimizer state "
                "partitioned), 2 (and gradients) and 3 (and parameters)",
            ),
            self.one_of("offload_optimizer", OFFLOAD),
            self.one_of("offload_param", OFFLOAD),
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


def build_parser() -> argparse.ArgumentParser:
    """This case's options (the launcher reads them from ``--help``)."""
    return TrainConfig.build_parser()


def parse_args(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> TrainConfig:
    """Parse and check every rule; a broken one exits with status 2 and its message (argparse's way)."""
    return TrainConfig.parse(argv, environ)
