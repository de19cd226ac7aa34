"""Arguments of ``torchtitan/llama`` and the rules between them, checked without torch or torchtitan.

Why no torch here: the launcher reads ``--help`` and runs ``--validate-only`` on the submit host before it
submits anything, so both must answer in a fraction of a second and must not need a GPU. The shapes are
``pytorch/fsdp``'s (``trainstack_train.config.MODEL_CONFIGS``), so both cases train the same networks.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from trainstack_train.config import BOOLEAN, DEVICES, LlamaRunConfig, Rule, auto_degree

# The shapes this case offers: pytorch/fsdp's, less the 70B one (nothing here has been sized for it).
CONFIGS = ("tiny", "small", "llama3_2_1b", "llama3_1_8b")
AC_MODES = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp8")
FP8_RECIPES = ("tensorwise", "rowwise")
GPU_ARCH_ENV = "TRAINSTACK_GPU_ARCH"


@dataclass
class TrainConfig(LlamaRunConfig):
    """One run; the defaults are the tiny CPU run the manifest launches."""

    CONFIGS: ClassVar[tuple[str, ...]] = CONFIGS
    DESCRIPTION: ClassVar[str] = "trainstack torchtitan/llama: torchtitan's Llama-3"

    fsdp: str = "auto"
    tp: int = 1
    pp: int = 1
    compile: str = "auto"
    ac: str = "none"
    precision: str = "bf16"
    fp8_recipe: str = "tensorwise"
    validate_only: str = "false"

    def fsdp_degree(self, world_size: int) -> int:
        """``auto``: every rank that tensor and pipeline parallelism leave over shards the weights."""
        return auto_degree(self.fsdp, world_size, self.tp * self.pp)

    def rule_groups(self, world_size: int, environ: Mapping[str, str]) -> list[Callable[[], Iterable[Rule]]]:
        """The shared rules and this case's values, then the degrees against the world, then float8's GPU."""
        return [
            self.run_rules,
            self._value_rules,
            self.checkpoint_rules,
            self._degree_rules,
            lambda: self._parallel_rules(world_size),
            lambda: [(False, refusal)] if (refusal := fp8_refusal(self, environ)) else [],
        ]

    def _value_rules(self) -> list[Rule]:
        return [
            self.clip_rule(),
            (self.device in DEVICES, f"--device must be auto, cpu or cuda: {self.device!r}"),
            (self.compile in ("auto", *BOOLEAN), "--compile must be auto, true or false"),
            self.one_of("ac", AC_MODES),
            self.one_of("precision", PRECISIONS),
            (self.fp8_recipe in FP8_RECIPES, f"--fp8-recipe must be one of {FP8_RECIPES}"),
        ]

    def _degree_rules(self) -> list[Rule]:
        return [
            self.degree_rule("fsdp"),
            self.at_least("tp", 1),
            self.at_least("pp", 1),
            *self.flag_rules("validate_only"),
        ]

    def _parallel_rules(self, world: int) -> list[Rule]:
        """The degrees against the shape and the world (processes of the job), torchtitan's constraints."""
        shape, tp, pp = self.model, self.tp, self.pp
        fsdp = self.fsdp_degree(world)
        product = fsdp * tp * pp
        return [
            (
                shape.n_heads % tp == 0 and shape.n_kv_heads % tp == 0,
                f"--tp {tp} must divide {self.config}'s attention heads (n_heads {shape.n_heads}, n_kv_heads "
                f"{shape.n_kv_heads}): each rank holds whole heads",
            ),
            (
                self.seq_len % tp == 0,
                f"--seq-len {self.seq_len} must be divisible by --tp {tp} (sequence parallelism splits it)",
            ),
            (
                pp <= shape.n_layers,
                f"--pp {pp} exceeds {self.config}'s {shape.n_layers} layers: every stage needs a layer",
            ),
            (
                product == world,
                f"--fsdp {fsdp} x --tp {tp} x --pp {pp} = {product} ranks, but the job has {world} "
                "processes (nodes x processes per node): the degrees' product must equal the world size",
            ),
            (
                pp == 1 or self.batch_size % pp == 0,
                f"--batch-size {self.batch_size} must be a multiple of --pp {pp} (one micro-batch per row)",
            ),
            (
                not shape.tie_embeddings or (fsdp == 1 and tp == 1 and pp == 1),
                f"--config {self.config} ties the output layer to the embedding, which torchtitan's "
                "FSDP, TP and PP plans place apart: it trains on one process (--fsdp 1 --tp 1 --pp 1)",
            ),
        ]


def fp8_refusal(cfg: TrainConfig, environ: Mapping[str, str]) -> str | None:
    """Why ``--precision fp8`` cannot run, or None. Known before any GPU is touched only from the catalog.

    The launcher exports the instance type's ``gpu_arch``; without it (a launch without an instance type) the
    same rule is applied again on the node against the device, in :mod:`titan_llama.build`.
    """
    if cfg.precision != "fp8":
        return None
    rule = "--precision fp8 needs a GPU with FP8 tensor cores (compute capability 8.9 or newer, sm_89+)"
    if cfg.device == "cpu":
        return f"{rule}; this run's device is cpu"
    arch = environ.get(GPU_ARCH_ENV, "").strip()
    if not arch:
        return None
    digits = arch.removeprefix("sm_").rstrip("abcdefghijklmnopqrstuvwxyz")
    if not digits.isdigit():
        return f"{GPU_ARCH_ENV} must look like sm_90 (the catalog's gpu_arch), got {arch!r}"
    if (int(digits[:-1]), int(digits[-1])) < (8, 9):
        return f"{rule}; this GPU is {arch} ({GPU_ARCH_ENV}): use --precision bf16"
    return None


def build_parser() -> argparse.ArgumentParser:
    """This case's options (the launcher reads them from ``--help``)."""
    return TrainConfig.build_parser()


def parse_args(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> TrainConfig:
    """Parse and check every rule (the degrees against ``WORLD_SIZE``); a broken one exits with status 2."""
    return TrainConfig.parse(argv, environ)
