"""Arguments of ``jax/llama`` and the rules between them, checked without jax.

Why no jax here: the launcher reads ``--help`` and runs ``--validate-only`` on the submit host before it
submits anything, so both must answer in a fraction of a second, without a GPU and without importing jaxlib.
The shapes are ``pytorch/fsdp``'s (``fsdp_llama.config.MODEL_CONFIGS``), so both cases train the same
networks.

The mesh has two axes: ``dp`` replicates the parameters, ``fsdp`` shards them (and the optimizer state) along
their first dimension. Every process drives one device (torchrun starts one process per GPU, or one CPU
process), so ``dp x fsdp`` is the job's number of processes, and the batch is split over both axes.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fsdp_llama.config import MODEL_CONFIGS, PEAK_ENV, ModelConfig, peak_from

# The shapes this case offers: pytorch/fsdp's tiny and small CPU shapes and the two Llama-3 shapes on GPUs.
CONFIGS = ("tiny", "small", "llama3_2_1b", "llama3_1_8b")
DEVICES = ("auto", "cpu", "cuda")
# auto: bf16 on GPU, fp32 on CPU (pytorch/fsdp's --mixed-precision auto). Parameters and the optimizer state
# stay in --param-dtype (fp32 master weights by default); the forward and backward compute in this dtype.
COMPUTE_DTYPES = ("auto", "bf16", "fp32")
PARAM_DTYPES = ("fp32", "bf16")
# auto: cuDNN's fused (flash) attention on GPU, XLA's reference elsewhere.
ATTENTION = ("auto", "xla", "cudnn")
REMAT = ("none", "full")


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
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    seed: int = 1234
    data: str = "synthetic"
    device: str = "auto"
    dp: int = 1
    fsdp: str = "auto"
    param_dtype: str = "fp32"
    compute_dtype: str = "auto"
    attention: str = "auto"
    remat: str = "none"
    coordinator_port: int = 0
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
        """``auto``: every process that ``--dp`` leaves over shards the weights."""
        if self.fsdp == "auto":
            return max(1, world_size // self.dp)
        return int(self.fsdp)

    def validate(self, world_size: int) -> None:
        """Each rule with the option it constrains named; the first one broken is raised."""
        if self.config not in CONFIGS:
            raise ValueError(f"--config {self.config!r} is unknown; choose one of {list(CONFIGS)}")
        # The mesh rules read the degrees, so the values are checked first (a lambda keeps them unread).
        for rules in (self._value_rules, lambda: self._mesh_rules(world_size)):
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
            (self.grad_clip > 0, f"--grad-clip must be > 0, got {self.grad_clip}"),
            (self.device in DEVICES, f"--device must be one of {DEVICES}, got {self.device!r}"),
            (
                self.compute_dtype in COMPUTE_DTYPES,
                f"--compute-dtype must be one of {COMPUTE_DTYPES}, got {self.compute_dtype!r}",
            ),
            (
                self.param_dtype in PARAM_DTYPES,
                f"--param-dtype must be one of {PARAM_DTYPES}, got {self.param_dtype!r}",
            ),
            (self.attention in ATTENTION, f"--attention must be one of {ATTENTION}, got {self.attention!r}"),
            (
                not (self.attention == "cudnn" and self.device == "cpu"),
                "--attention cudnn needs a GPU; this run's device is cpu",
            ),
            (self.remat in REMAT, f"--remat must be one of {REMAT}, got {self.remat!r}"),
            (
                0 <= self.coordinator_port < 65536,
                f"--coordinator-port must be a port (0 = MASTER_PORT + 1), got {self.coordinator_port}",
            ),
            (self.checkpoint_every >= 0, f"--checkpoint-every must be >= 0, got {self.checkpoint_every}"),
            (
                not (self.checkpoint_every and not self.checkpoint_dir),
                "--checkpoint-every needs --checkpoint-dir",
            ),
            (self.max_steps_this_run >= 0, "--max-steps-this-run must be >= 0"),
            (self.dp >= 1, f"--dp must be >= 1, got {self.dp}"),
            (
                self.fsdp == "auto" or (self.fsdp.isdigit() and int(self.fsdp) >= 1),
                f"--fsdp must be auto or a degree >= 1, got {self.fsdp!r}",
            ),
            (self.validate_only in ("true", "false"), "--validate-only must be true or false"),
        ]

    def _mesh_rules(self, world: int) -> list[tuple[bool, str]]:
        """The mesh against the job's processes and the shape's dimensions it shards."""
        shape, dp = self.model, self.dp
        fsdp = self.fsdp_degree(world)
        sharded = {"dim": shape.dim, "ffn_dim": shape.ffn_dim, "vocab_size": shape.vocab_size}
        uneven = {name: size for name, size in sharded.items() if size % fsdp}
        return [
            (
                dp * fsdp == world,
                f"--dp {dp} x --fsdp {fsdp} = {dp * fsdp} devices, but the job has {world} processes "
                "(nodes x processes per node, one device each): the mesh must hold every process",
            ),
            (
                not uneven,
                f"--fsdp {fsdp} must divide {self.config}'s sharded dimensions {sharded}: "
                f"{sorted(uneven)} do not split evenly",
            ),
        ]


def _word(value: str) -> str:
    """The launcher's booleans (``True``, ``yes``, ``1``) as ``true``/``false``."""
    lowered = value.strip().lower()
    aliases = {"1": "true", "yes": "true", "on": "true", "0": "false", "no": "false", "off": "false"}
    return aliases.get(lowered, lowered)


def build_parser() -> argparse.ArgumentParser:
    """One ``--kebab-case`` option per field, typed from its default."""
    parser = argparse.ArgumentParser(description="trainstack jax/llama: Llama-3 in JAX on a (dp, fsdp) mesh")
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
