"""Arguments of ``jax/llama`` and the rules between them, checked without jax.

Why no jax here: the launcher reads ``--help`` and runs ``--validate-only`` on the submit host before it
submits anything, so both must answer in a fraction of a second, without a GPU and without importing jaxlib.
The shapes are ``pytorch/fsdp``'s (``trainstack_train.config.MODEL_CONFIGS``), so both cases train the same
networks.

The mesh has two axes: ``dp`` replicates the parameters, ``fsdp`` shards them (and the optimizer state) along
their first dimension. Every process drives one device (torchrun starts one process per GPU, or one CPU
process), so ``dp x fsdp`` is the job's number of processes, and the batch is split over both axes.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from trainstack_train.config import DEVICES, LlamaRunConfig, Rule, auto_degree

# The shapes this case offers: pytorch/fsdp's tiny and small CPU shapes and the two Llama-3 shapes on GPUs.
CONFIGS = ("tiny", "small", "llama3_2_1b", "llama3_1_8b")
# auto: bf16 on GPU, fp32 on CPU (pytorch/fsdp's --mixed-precision auto). Parameters and the optimizer state
# stay in --param-dtype (fp32 master weights by default); the forward and backward compute in this dtype.
COMPUTE_DTYPES = ("auto", "bf16", "fp32")
PARAM_DTYPES = ("fp32", "bf16")
# auto: cuDNN's fused (flash) attention on GPU, XLA's reference elsewhere.
ATTENTION = ("auto", "xla", "cudnn")
REMAT = ("none", "full")


@dataclass
class TrainConfig(LlamaRunConfig):
    """One run; the defaults are the tiny CPU run the manifest launches."""

    CONFIGS: ClassVar[tuple[str, ...]] = CONFIGS
    DESCRIPTION: ClassVar[str] = "trainstack jax/llama: Llama-3 in JAX on a (dp, fsdp) mesh"

    beta1: float = 0.9
    beta2: float = 0.95
    dp: int = 1
    fsdp: str = "auto"
    param_dtype: str = "fp32"
    compute_dtype: str = "auto"
    attention: str = "auto"
    remat: str = "none"
    coordinator_port: int = 0
    validate_only: str = "false"

    def fsdp_degree(self, world_size: int) -> int:
        """``auto``: every process that ``--dp`` leaves over shards the weights."""
        return auto_degree(self.fsdp, world_size, self.dp)

    def rule_groups(self, world_size: int, environ: Mapping[str, str]) -> list[Callable[[], Iterable[Rule]]]:
        """The shared rules and this case's values, then the mesh (which reads the degrees checked before)."""
        del environ  # nothing here depends on the node's variables
        return [
            self.run_rules,
            self._value_rules,
            self.checkpoint_rules,
            self._degree_rules,
            lambda: self._mesh_rules(world_size),
        ]

    def _value_rules(self) -> list[Rule]:
        return [
            self.clip_rule(),
            self.one_of("device", DEVICES),
            self.one_of("compute_dtype", COMPUTE_DTYPES),
            self.one_of("param_dtype", PARAM_DTYPES),
            self.one_of("attention", ATTENTION),
            (
                not (self.attention == "cudnn" and self.device == "cpu"),
                "--attention cudnn needs a GPU; this run's device is cpu",
            ),
            self.one_of("remat", REMAT),
            (
                0 <= self.coordinator_port < 65536,
                f"--coordinator-port must be a port (0 = MASTER_PORT + 1), got {self.coordinator_port}",
            ),
        ]

    def _degree_rules(self) -> list[Rule]:
        return [
            (self.max_steps_this_run >= 0, "--max-steps-this-run must be >= 0"),
            self.at_least("dp", 1),
            self.degree_rule("fsdp"),
            *self.flag_rules("validate_only"),
        ]

    def _mesh_rules(self, world: int) -> list[Rule]:
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


def build_parser() -> argparse.ArgumentParser:
    """This case's options (the launcher reads them from ``--help``)."""
    return TrainConfig.build_parser()


def parse_args(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> TrainConfig:
    """Parse and check every rule (the mesh against ``WORLD_SIZE``); a broken one exits with status 2."""
    return TrainConfig.parse(argv, environ)
