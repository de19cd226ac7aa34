"""Arguments of ``megatron/gpt`` and the rules between them, checked without torch or megatron-core.

Why no torch here: the launcher reads ``--help`` and runs ``--validate-only`` on the submit host before it
submits anything, so both must answer in a fraction of a second and must not need a GPU. The shapes are
``pytorch/fsdp``'s (``fsdp_llama.config.MODEL_CONFIGS``), so both cases train the same networks. Each rule
is one of megatron-core's own constraints, stated here so that a bad degree fails before a job is queued
instead of as an assertion on the first rank.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fsdp_llama.config import MODEL_CONFIGS, PEAK_ENV, ModelConfig, peak_from

# The shapes this case offers: pytorch/fsdp's tiny one and the two Llama-3 shapes measured on GPUs.
CONFIGS = ("tiny", "llama3_2_1b", "llama3_1_8b")
BOOLEAN = ("true", "false")
FLAGS = ("sequence_parallel", "distributed_optimizer", "validate_only", "preflight")
RECOMPUTE = ("none", "selective", "full")
# Float8 in megatron-core goes through Transformer Engine, which this case does not install.
PRECISIONS = ("bf16",)
# What megatron-core 0.16.1 cannot do without a GPU (named in the refusal of --device cpu, in a preflight's
# summary and in the docs). The first of them that a run reaches is DistributedDataParallel's buffer.
CUDA_ONLY = (
    "megatron-core 0.16.1 trains on CUDA only: DistributedDataParallel allocates its gradient buffer on "
    "torch.cuda.current_device() (_ParamAndGradBuffer), RotaryEmbedding.get_emb calls "
    "torch.cuda.current_device(), DotProductAttention.forward takes its buffers from "
    "GlobalMemoryBuffer.get_tensor on the current CUDA device, "
    "tensor_parallel.model_parallel_cuda_manual_seed asserts CUDA, and under pipeline parallelism a tied "
    "output's GPTModel moves the embedding to CUDA (LanguageModule.setup_embeddings_and_output_layer)"
)


@dataclass
class TrainConfig:
    """One run; the defaults are the tiny run the manifest launches (on one GPU)."""

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
    tp: int = 1
    pp: int = 1
    dp: str = "auto"
    sequence_parallel: str = "false"
    distributed_optimizer: str = "false"
    recompute: str = "none"
    precision: str = "bf16"
    checkpoint_dir: str = ""
    checkpoint_every: int = 0
    summary_json: str = ""
    metric_warmup_steps: int = 3
    max_steps_this_run: int = 0
    peak_tflops: float | None = None
    validate_only: str = "false"
    preflight: str = "false"

    @property
    def model(self) -> ModelConfig:
        """The named shape (validated first)."""
        return MODEL_CONFIGS[self.config]

    def dp_degree(self, world_size: int) -> int:
        """``auto``: every rank that tensor and pipeline parallelism leave over replicates the model."""
        if self.dp == "auto":
            return max(1, world_size // (self.tp * self.pp))
        return int(self.dp)

    def micro_batches(self) -> int:
        """One micro-batch per row under pipeline parallelism (the schedule overlaps them), else one."""
        return self.batch_size if self.pp > 1 else 1

    def validate(self, world_size: int) -> None:
        """Each rule with the option it constrains named; the first one broken is raised."""
        if self.config not in CONFIGS:
            raise ValueError(f"--config {self.config!r} is unknown; choose one of {list(CONFIGS)}")
        # The values first: the degree rules read them (an unparsable --dp must fail on its own rule).
        for rules in (self._value_rules, lambda: self._parallel_rules(world_size)):
            for ok, message in rules():
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
            (
                self.warmup_steps < self.steps,
                f"--warmup-steps {self.warmup_steps} must be below --steps {self.steps} (megatron-core's "
                "schedule decays over the steps after the warm-up)",
            ),
            (self.grad_clip > 0, f"--grad-clip must be > 0, got {self.grad_clip}"),
            (self.device in ("auto", "cuda", "cpu"), f"--device must be auto, cuda or cpu: {self.device!r}"),
            (
                self.device != "cpu" or self.preflight == "true",
                f"--device cpu is refused: {CUDA_ONLY} (--preflight true runs what comes before them on CPU)",
            ),
            (self.recompute in RECOMPUTE, f"--recompute must be one of {RECOMPUTE}, got {self.recompute!r}"),
            (
                self.precision in PRECISIONS,
                f"--precision must be one of {PRECISIONS}, got {self.precision!r} (float8 needs Transformer "
                "Engine, which this test case does not install)",
            ),
            (self.checkpoint_every >= 0, f"--checkpoint-every must be >= 0, got {self.checkpoint_every}"),
            (
                not (self.checkpoint_every and not self.checkpoint_dir),
                "--checkpoint-every needs --checkpoint-dir",
            ),
            (
                self.dp == "auto" or (self.dp.isdigit() and int(self.dp) >= 1),
                f"--dp must be auto or a degree >= 1, got {self.dp!r}",
            ),
            (self.tp >= 1, f"--tp must be >= 1, got {self.tp}"),
            (self.pp >= 1, f"--pp must be >= 1, got {self.pp}"),
            *((getattr(self, flag) in BOOLEAN, f"--{_option(flag)} must be true or false") for flag in FLAGS),
        ]

    def _parallel_rules(self, world: int) -> list[tuple[bool, str]]:
        """The degrees against the shape and the world (processes of the job), megatron-core's constraints."""
        shape, tp, pp = self.model, self.tp, self.pp
        dp = self.dp_degree(world)
        product = tp * pp * dp
        sequence_parallel = self.sequence_parallel == "true"
        return [
            (
                shape.n_heads % tp == 0 and shape.n_kv_heads % tp == 0,
                f"--tp {tp} must divide {self.config}'s attention heads (n_heads {shape.n_heads}, n_kv_heads "
                f"{shape.n_kv_heads}): each rank holds whole query heads and whole key/value groups",
            ),
            (
                shape.ffn_dim % tp == 0 and shape.vocab_size % tp == 0,
                f"--tp {tp} must divide {self.config}'s FFN width {shape.ffn_dim} and vocabulary "
                f"{shape.vocab_size}: the MLP and the vocab-parallel embedding are split evenly",
            ),
            (
                pp <= shape.n_layers,
                f"--pp {pp} exceeds {self.config}'s {shape.n_layers} layers: every stage needs a layer",
            ),
            (
                shape.n_layers % pp == 0,
                f"--pp {pp} must divide {self.config}'s {shape.n_layers} layers (megatron-core's stages hold "
                "equal numbers of layers)",
            ),
            (
                product == world,
                f"--tp {tp} x --pp {pp} x --dp {dp} = {product} ranks, but the job has {world} processes "
                "(nodes x processes per node): the degrees' product must equal the world size",
            ),
            (
                not sequence_parallel or tp > 1,
                "--sequence-parallel true needs --tp > 1: it splits the tensor-parallel group's activations",
            ),
            (
                not sequence_parallel or self.seq_len % tp == 0,
                f"--seq-len {self.seq_len} must be divisible by --tp {tp} under --sequence-parallel",
            ),
            (
                not sequence_parallel,
                "--sequence-parallel true cannot be built: megatron-core 0.16.1's local layer spec makes "
                "RMSNorm a WrappedTorchNorm (LocalSpecProvider.layer_norm), which asserts sequence "
                "parallelism off; only Transformer Engine's spec (not installed by this case) allows it",
            ),
        ]


def _option(field: str) -> str:
    """The command-line spelling of a field (``sequence_parallel`` is ``sequence-parallel``)."""
    return field.replace("_", "-")


def _word(value: str) -> str:
    """The launcher's booleans (``True``, ``yes``, ``1``) as ``true``/``false``."""
    lowered = value.strip().lower()
    aliases = {"1": "true", "yes": "true", "on": "true", "0": "false", "no": "false", "off": "false"}
    return aliases.get(lowered, lowered)


def build_parser() -> argparse.ArgumentParser:
    """One ``--kebab-case`` option per field, typed from its default."""
    parser = argparse.ArgumentParser(description="trainstack megatron/gpt: megatron-core's GPTModel")
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
        cfg.validate(world_size(env))
    except ValueError as err:
        parser.error(str(err))
    if cfg.peak_tflops is not None and not (math.isfinite(cfg.peak_tflops) and cfg.peak_tflops > 0):
        parser.error(f"--peak-tflops must be a finite number > 0, got {cfg.peak_tflops!r}")
    return cfg
