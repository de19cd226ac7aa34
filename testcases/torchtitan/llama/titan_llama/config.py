"""Arguments of ``torchtitan/llama`` and the rules between them, checked without torch or torchtitan.

Why no torch here: the launcher reads ``--help`` and runs ``--validate-only`` on the submit host before it
submits anything, so both must answer in a fraction of a second and must not need a GPU. The shapes are
``pytorch/fsdp``'s (``fsdp_llama.config.MODEL_CONFIGS``), so both cases train the same networks.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fsdp_llama.config import MODEL_CONFIGS, PEAK_ENV, ModelConfig, peak_from

# The shapes this case offers: pytorch/fsdp's, less the 70B one (nothing here has been sized for it).
CONFIGS = ("tiny", "small", "llama3_2_1b", "llama3_1_8b")
AC_MODES = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp8")
FP8_RECIPES = ("tensorwise", "rowwise")
GPU_ARCH_ENV = "TRAINSTACK_GPU_ARCH"


@dataclass
class TrainConfig:
    """One run; the defaults are the tiny CPU run the manifest launches."""

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
    fsdp: str = "auto"
    tp: int = 1
    pp: int = 1
    compile: str = "auto"
    ac: str = "none"
    precision: str = "bf16"
    fp8_recipe: str = "tensorwise"
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

    def fsdp_degree(self, world_size: int) -> int:
        """``auto``: every rank that tensor and pipeline parallelism leave over shards the weights."""
        if self.fsdp == "auto":
            return max(1, world_size // (self.tp * self.pp))
        return int(self.fsdp)

    def validate(self, world_size: int, environ: Mapping[str, str]) -> None:
        """Each rule with the option it constrains named; the first one broken is raised."""
        if self.config not in CONFIGS:
            raise ValueError(f"--config {self.config!r} is unknown; choose one of {list(CONFIGS)}")
        for ok, message in self._value_rules():
            if not ok:
                raise ValueError(message)
        for ok, message in self._parallel_rules(world_size):
            if not ok:
                raise ValueError(message)
        refusal = fp8_refusal(self, environ)
        if refusal:
            raise ValueError(refusal)

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
            (self.grad_clip > 0, f"--grad-clip must be > 0, got {self.grad_clip}"),
            (self.device in ("auto", "cpu", "cuda"), f"--device must be auto, cpu or cuda: {self.device!r}"),
            (self.compile in ("auto", "true", "false"), "--compile must be auto, true or false"),
            (self.ac in AC_MODES, f"--ac must be one of {AC_MODES}, got {self.ac!r}"),
            (
                self.precision in PRECISIONS,
                f"--precision must be one of {PRECISIONS}, got {self.precision!r}",
            ),
            (self.fp8_recipe in FP8_RECIPES, f"--fp8-recipe must be one of {FP8_RECIPES}"),
            (self.checkpoint_every >= 0, f"--checkpoint-every must be >= 0, got {self.checkpoint_every}"),
            (
                not (self.checkpoint_every and not self.checkpoint_dir),
                "--checkpoint-every needs --checkpoint-dir",
            ),
            (
                self.fsdp == "auto" or (self.fsdp.isdigit() and int(self.fsdp) >= 1),
                f"--fsdp must be auto or a degree >= 1, got {self.fsdp!r}",
            ),
            (self.tp >= 1, f"--tp must be >= 1, got {self.tp}"),
            (self.pp >= 1, f"--pp must be >= 1, got {self.pp}"),
            (self.validate_only in ("true", "false"), "--validate-only must be true or false"),
        ]

    def _parallel_rules(self, world: int) -> list[tuple[bool, str]]:
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


def _word(value: str) -> str:
    """The launcher's booleans (``True``, ``yes``, ``1``) as ``true``/``false``."""
    lowered = value.strip().lower()
    aliases = {"1": "true", "yes": "true", "on": "true", "0": "false", "no": "false", "off": "false"}
    return aliases.get(lowered, lowered)


def build_parser() -> argparse.ArgumentParser:
    """One ``--kebab-case`` option per field, typed from its default."""
    parser = argparse.ArgumentParser(description="trainstack torchtitan/llama: torchtitan's Llama-3")
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


def world_size(environ: Mapping[str, str]) -> int:
    """torchrun's ``WORLD_SIZE``; a plain ``python`` start is one process."""
    return int(environ.get("WORLD_SIZE", "1"))


def parse_args(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> TrainConfig:
    """Parse and check every rule; a broken one exits with status 2 and its message (argparse's way)."""
    env = os.environ if environ is None else environ
    parser = build_parser()
    namespace = parser.parse_args(argv)
    try:
        namespace.peak_tflops = peak_from(namespace.peak_tflops, env)
        cfg = TrainConfig(**vars(namespace))
        cfg.validate(world_size(env), env)
    except ValueError as err:
        parser.error(str(err))
    if cfg.peak_tflops is not None and not (math.isfinite(cfg.peak_tflops) and cfg.peak_tflops > 0):
        parser.error(f"--peak-tflops must be a finite number > 0, got {cfg.peak_tflops!r}")
    return cfg
