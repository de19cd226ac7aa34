"""Configuration as dataclasses, parsed from ``--key value`` arguments.

The launcher passes every argument as ``--key value`` (booleans as ``true``/``false``), so the parser accepts
exactly that form and rejects unknown keys by name before any process group is created.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Self, TypeVar

from .storage import is_s3, s3_problem

T = TypeVar("T")


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
# Grouped-query attention: native hands SDPA the n_kv_heads K and V (enable_gqa); expand copies them to
# n_heads heads first, for SDPA backends that take only equal head counts. auto: native, except with the
# memory-efficient backend, whose CUDA kernel in torch 2.11 refuses fewer K/V heads than query heads.
GQA_MODES = ("native", "expand")
GQA_CHOICES = ("auto", *GQA_MODES)
# coordinate: Inductor times neighbouring block sizes of every generated kernel once (longer compile);
# max-autotune: also times Triton GEMM templates, with their fused epilogues, against cuBLAS (much longer).
COMPILE_TUNINGS = ("default", "coordinate", "max-autotune")
# The loss's per-chunk kernels (trainstack_train.loss). auto: the Triton kernel on CUDA, else the compiled
# torch reference when compiling, else the plain one.
LOSS_KERNELS = ("eager", "compiled", "triton")
LOSS_KERNEL_CHOICES = ("auto", *LOSS_KERNELS)
# An asynchronous checkpoint's staging copy: new pageable memory per save, or one pinned buffer for the run.
STAGING_CHOICES = ("pageable", "pinned")
# The GPU's dense BF16 peak in TFLOP/s (the MFU denominator) when --peak-tflops is not given. The launcher
# sets it from the instance catalog of the collection that stages this payload (which keeps no GPU table).
PEAK_ENV = "TRAINSTACK_GPU_PEAK_TFLOPS"
# String options that name files or directories: taken as given, never through the boolean spelling's
# lower-casing (a checkpoint directory /fsx/Run1 is not /fsx/run1).
PATH_FIELDS = frozenset({"data", "checkpoint_dir", "summary_json", "model_path"})
# Compute precision of the blocks' matrix products: bf16, or float8 through torchao (trainstack_train.fp8)
# with tensorwise or rowwise scaling; every other part keeps the bf16/fp32 numerics either way.
PRECISIONS = ("bf16", "fp8")
FP8_RECIPES = ("tensorwise", "rowwise")


Rule = tuple[bool, str]
DEVICES = ("auto", "cpu", "cuda")
BOOLEAN = ("true", "false")


def option(name: str) -> str:
    """The command-line spelling of a field (``batch_size`` is ``--batch-size``)."""
    return "--" + name.replace("_", "-")


def auto_degree(value: str, world_size: int, others: int) -> int:
    """A parallel degree, ``auto`` or a number; ``auto`` takes every process the other degrees leave over."""
    return max(1, world_size // others) if value == "auto" else int(value)


def world_size(environ: Mapping[str, str]) -> int:
    """torchrun's ``WORLD_SIZE``; a plain ``python`` start is one process."""
    return int(environ.get("WORLD_SIZE", "1"))


@dataclass
class RunSchedule:
    """How long and how a run trains: the options every test case takes, with the same names and defaults.

    A case whose other options differ too much for :class:`LlamaRunConfig` (hf/finetune) still starts from
    these, overriding a default where its training differs (fine-tuning's learning rate, say).
    """

    steps: int = 20
    batch_size: int = 8
    seq_len: int = 128
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 2
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 1234


@dataclass
class LlamaRunConfig(RunSchedule):
    """The options every Llama test case shares (run length, schedule, data, checkpoints, metrics), no torch.

    Why one base: each case (pytorch/fsdp, deepspeed/zero3, jax/llama, torchtitan/llama, megatron/gpt)
    trains the same shapes on the same schedule and writes the same summary, so a rule such as
    ``--checkpoint-every needs --checkpoint-dir`` is stated once and refused with the same words everywhere.
    A case adds its own fields and returns its rule groups from :meth:`rule_groups`; ``validate`` raises the
    first broken rule. Nothing here imports torch: jax/llama and the launcher's ``--validate-only`` read it.
    """

    # The shapes a case offers (names in MODEL_CONFIGS), its ``--help`` line, and the string fields whose
    # value goes through the launcher's boolean spelling (None: every string field).
    CONFIGS: ClassVar[tuple[str, ...]] = tuple(sorted(MODEL_CONFIGS))
    DESCRIPTION: ClassVar[str] = "trainstack: a Llama-3 decoder"
    # Whether --checkpoint-dir may be an s3:// URI (the case checkpoints through trainstack_train.storage).
    S3_CHECKPOINTS: ClassVar[bool] = False
    S3_REFUSAL: ClassVar[str] = (
        "this test case writes checkpoints to a directory all nodes share; "
        "s3:// URIs are taken by pytorch/fsdp"
    )
    WORD_FIELDS: ClassVar[frozenset[str] | None] = None

    config: str = "tiny"
    data: str = "synthetic"
    device: str = "auto"
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

    def at_least(self, name: str, low: float) -> Rule:
        """``--name`` must be ``>= low`` (a count, a degree, a step number)."""
        value = getattr(self, name)
        return value >= low, f"{option(name)} must be >= {low}, got {value}"

    def one_of(self, name: str, choices: Sequence[object]) -> Rule:
        """``--name`` must be one of the given words."""
        value = getattr(self, name)
        return value in choices, f"{option(name)} must be one of {tuple(choices)}, got {value!r}"

    def flag_rules(self, *names: str) -> list[Rule]:
        """Each named option must be ``true`` or ``false`` (after the launcher's spelling was normalised)."""
        return [(getattr(self, name) in BOOLEAN, f"{option(name)} must be true or false") for name in names]

    def degree_rule(self, name: str) -> Rule:
        """A parallel degree: ``auto`` or a whole number >= 1."""
        value = getattr(self, name)
        ok = value == "auto" or (value.isdigit() and int(value) >= 1)
        return ok, f"{option(name)} must be auto or a degree >= 1, got {value!r}"

    def run_rules(self) -> list[Rule]:
        """The run's length, batch shape and learning-rate schedule, as every case checks them."""
        limit = self.model.max_seq_len
        return [
            self.at_least("steps", 1),
            self.at_least("batch_size", 1),
            self.at_least("seq_len", 2),
            (self.seq_len <= limit, f"--seq-len {self.seq_len} exceeds {self.config}'s max_seq_len {limit}"),
            (self.lr > 0, f"--lr must be > 0, got {self.lr}"),
            (0 <= self.min_lr_ratio <= 1, f"--min-lr-ratio must be in [0, 1], got {self.min_lr_ratio}"),
            self.at_least("warmup_steps", 0),
        ]

    def clip_rule(self) -> Rule:
        """Clipping to a norm of 0 (or below) would zero every update."""
        return self.grad_clip > 0, f"--grad-clip must be > 0, got {self.grad_clip}"

    def checkpoint_rules(self, environ: Mapping[str, str] | None = None) -> list[Rule]:
        """Periodic checkpoints need a directory to go to; an ``s3://`` one a case that writes to S3.

        ``environ`` (the region's variables) is read only by a case that takes S3 URIs; the others refuse
        ``s3://`` outright, which would otherwise become a local directory named ``s3:``.
        """
        rules = [
            self.at_least("checkpoint_every", 0),
            (
                not (self.checkpoint_every and not self.checkpoint_dir),
                "--checkpoint-every needs --checkpoint-dir",
            ),
        ]
        if not is_s3(self.checkpoint_dir):
            return rules
        if not self.S3_CHECKPOINTS:
            rules.append((False, f"--checkpoint-dir {self.checkpoint_dir}: {self.S3_REFUSAL}"))
            return rules
        problem = s3_problem(self.checkpoint_dir, {} if environ is None else environ)
        rules.append((problem is None, f"--checkpoint-dir {problem}"))
        return rules

    def rule_groups(self, world_size: int, environ: Mapping[str, str]) -> list[Callable[[], Iterable[Rule]]]:
        """The case's rules in groups, in order: a later group may read what an earlier one has checked."""
        del world_size, environ  # the shared rules read neither; a case's own groups may
        return [self.run_rules, self.checkpoint_rules]

    def validate(self, world_size: int = 1, environ: Mapping[str, str] | None = None) -> None:
        """Reject bad values with the option named, before a process group or a model exists."""
        if self.config not in self.CONFIGS:
            raise ValueError(f"--config {self.config!r} is unknown; choose one of {list(self.CONFIGS)}")
        for group in self.rule_groups(world_size, {} if environ is None else environ):
            for ok, message in group():
                if not ok:
                    raise ValueError(message)
        if self.peak_tflops is not None and not positive_finite(self.peak_tflops):
            raise ValueError(f"--peak-tflops must be a finite number > 0, got {self.peak_tflops!r}")

    @classmethod
    def build_parser(cls) -> argparse.ArgumentParser:
        """One ``--kebab-case`` option per field, typed from the field's default."""
        return options_parser(cls, cls.DESCRIPTION, cls.WORD_FIELDS)

    @classmethod
    def parse(cls, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Self:
        """Parse and check every rule; a broken one exits with status 2 and its message (argparse's way)."""
        env = os.environ if environ is None else environ
        return parse_options(
            cls.build_parser(), cls, argv, env, lambda cfg: cfg.validate(world_size(env), env)
        )


def options_parser(
    config_type: type, description: str, word_fields: Collection[str] | None = None
) -> argparse.ArgumentParser:
    """One ``--kebab-case`` option per dataclass field, typed from its default.

    ``--peak-tflops`` is read as text and checked by :func:`peak_from`, so the message names the option or the
    variable. ``word_fields`` (None: every string field but the paths of ``PATH_FIELDS``) take the launcher's
    boolean spelling.
    """
    parser = argparse.ArgumentParser(description=description)
    defaults = config_type()
    for f in dataclasses.fields(config_type):
        default = getattr(defaults, f.name)
        if word_fields is None:
            words = isinstance(default, str) and f.name not in PATH_FIELDS
        else:
            words = f.name in word_fields
        if f.name == "peak_tflops":
            parser.add_argument(
                option(f.name), default=None, metavar="TFLOPS", help=f"dense BF16 peak per GPU ({PEAK_ENV})"
            )
        elif words:
            parser.add_argument(option(f.name), type=_bool_word, default=default)
        else:
            parser.add_argument(option(f.name), type=type(default), default=default)
    return parser


def parse_options(
    parser: argparse.ArgumentParser,
    config_type: Callable[..., T],
    argv: Sequence[str] | None,
    environ: Mapping[str, str],
    check: Callable[[T], object],
) -> T:
    """Parse, resolve the peak and check; a refusal exits with status 2 and its message (argparse's way)."""
    namespace = parser.parse_args(argv)
    try:
        namespace.peak_tflops = peak_from(namespace.peak_tflops, environ)
        cfg = config_type(**vars(namespace))
        check(cfg)
    except ValueError as err:
        parser.error(str(err))
    return cfg


def _bool_word(value: str) -> str:
    """Normalise the launcher's boolean spelling; keep ``auto`` for fields that allow it."""
    lowered = value.strip().lower()
    aliases = {"1": "true", "yes": "true", "on": "true", "0": "false", "no": "false", "off": "false"}
    return aliases.get(lowered, lowered)


def positive_finite(value: object) -> bool:
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
    if not positive_finite(value):
        raise ValueError(f"{source} must be a finite number > 0 (dense BF16 TFLOP/s per GPU), got {text!r}")
    return value


@dataclass
class TrainConfig(LlamaRunConfig):
    """pytorch/fsdp's run; defaults are the tiny CPU smoke run the lab demo launches."""

    DESCRIPTION: ClassVar[str] = "trainstack pytorch/fsdp: Llama decoder with FSDP2"
    S3_CHECKPOINTS: ClassVar[bool] = True
    WORD_FIELDS: ClassVar[frozenset[str] | None] = frozenset(
        {"compile", "reshard_after_forward", "fsdp", "fp8_head", "checkpoint_async"}
    )

    beta1: float = 0.9
    beta2: float = 0.95
    mixed_precision: str = "auto"
    precision: str = "bf16"
    fp8_recipe: str = "tensorwise"
    fp8_head: str = "false"
    master_dtype: str = "fp32"
    reshard_after_forward: str = "auto"
    fsdp: str = "auto"
    compile: str = "auto"
    compile_tuning: str = "default"
    ac: str = "none"
    attn_backend: str = "auto"
    gqa: str = "auto"
    loss_chunk_tokens: int = 4096
    loss_kernel: str = "auto"
    # Checkpoints written by a background thread (torch.distributed.checkpoint.async_save) while training
    # goes on, and which complete ones to keep: the newest N (0: all) and, besides, every step divisible by M.
    checkpoint_async: str = "false"
    checkpoint_keep_last: int = 0
    checkpoint_keep_every: int = 0
    # Threads per rank writing a checkpoint's files (torch.distributed.checkpoint's FileSystemWriter).
    checkpoint_write_threads: int = 1
    # Where an asynchronous save copies the state before the write: fresh pageable host memory each save, or
    # one pinned buffer kept for the run (faster copies from the GPU, at the cost of holding the host memory).
    checkpoint_staging: str = "pageable"

    def rule_groups(self, world_size: int, environ: Mapping[str, str]) -> list[Callable[[], Iterable[Rule]]]:
        """The shared rules, then retention's, the loss's, the kernels', the precision's and FSDP's."""
        del world_size  # one process or many, the same rules
        return [
            self.run_rules,
            functools.partial(self.checkpoint_rules, environ),
            self._retention_rules,
            self._value_rules,
        ]

    def _retention_rules(self) -> list[Rule]:
        """Retention and asynchronous saving only mean something for periodic checkpoints."""
        periodic = bool(self.checkpoint_every)
        return [
            *self.flag_rules("checkpoint_async"),
            self.at_least("checkpoint_keep_last", 0),
            self.at_least("checkpoint_keep_every", 0),
            self.at_least("checkpoint_write_threads", 1),
            self.one_of("checkpoint_staging", STAGING_CHOICES),
            (
                self.checkpoint_staging == "pageable" or self.checkpoint_async == "true",
                "--checkpoint-staging pinned needs --checkpoint-async true "
                "(a synchronous save stages nothing)",
            ),
            (
                self.checkpoint_staging == "pageable" or not is_s3(self.checkpoint_dir),
                "--checkpoint-staging pinned needs a directory --checkpoint-dir, not s3:// (the S3 writer "
                "stages each save anew)",
            ),
            *(
                (periodic or getattr(self, name) in (0, "false"), f"{option(name)} needs --checkpoint-every")
                for name in ("checkpoint_async", "checkpoint_keep_last", "checkpoint_keep_every")
            ),
        ]

    def _value_rules(self) -> list[Rule]:
        return [
            self.at_least("loss_chunk_tokens", 1),
            self.one_of("loss_kernel", LOSS_KERNEL_CHOICES),
            self.one_of("ac", AC_MODES),
            (self.attn_backend in ATTN_BACKENDS, f"--attn-backend must be one of {ATTN_BACKENDS}"),
            self.one_of("gqa", GQA_CHOICES),
            (
                not (self.gqa == "native" and self.attn_backend == "efficient"),
                "--gqa native needs an SDPA kernel that takes fewer K/V heads than query heads; "
                "--attn-backend efficient does not: use --gqa expand (or auto)",
            ),
            (self.device in DEVICES, f"--device must be auto, cpu or cuda: {self.device!r}"),
            (
                self.mixed_precision in ("auto", "bf16", "fp32"),
                f"--mixed-precision must be auto, bf16 or fp32, got {self.mixed_precision!r}",
            ),
            self.one_of("precision", PRECISIONS),
            self.one_of("fp8_recipe", FP8_RECIPES),
            *self.flag_rules("fp8_head"),
            (
                self.fp8_head == "false" or self.precision == "fp8",
                "--fp8-head true puts the LM head in float8 on top of the blocks: it needs --precision fp8",
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
                self.reshard_after_forward in ("auto", *BOOLEAN),
                "--reshard-after-forward must be auto, true or false",
            ),
            (self.compile in ("auto", *BOOLEAN), "--compile must be auto, true or false"),
            self.one_of("compile_tuning", COMPILE_TUNINGS),
            (self.fsdp in ("auto", *BOOLEAN), "--fsdp must be auto, true or false"),
        ]

    @property
    def gqa_mode(self) -> str:
        """The grouped-query attention ``--gqa auto`` resolves to (see ``GQA_CHOICES``)."""
        if self.gqa != "auto":
            return self.gqa
        return "expand" if self.attn_backend == "efficient" else "native"

    def validate(self, world_size: int = 1, environ: Mapping[str, str] | None = None) -> None:
        """The rules, then the shape's own (heads against width), each with the offending value named."""
        super().validate(world_size, environ)
        self.model.validate()


def build_parser() -> argparse.ArgumentParser:
    """pytorch/fsdp's options (the launcher reads them from ``--help``)."""
    return TrainConfig.build_parser()


def parse_args(argv: Sequence[str] | None = None) -> TrainConfig:
    """Parse and validate; argparse itself names an unknown option and exits with status 2."""
    return TrainConfig.parse(argv, os.environ)
