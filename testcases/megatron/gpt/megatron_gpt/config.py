"""Arguments of ``megatron/gpt`` and the rules between them, checked without torch or megatron-core.

Why no torch here: the launcher reads ``--help`` and runs ``--validate-only`` on the submit host before it
submits anything, so both must answer in a fraction of a second and must not need a GPU. The shapes are
``pytorch/fsdp``'s (``trainstack_train.config.MODEL_CONFIGS``), so both cases train the same networks. Each
rule is one of megatron-core's own constraints, stated here so that a bad degree fails before a job is queued
instead of as an assertion on the first rank.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from trainstack_train.config import LlamaRunConfig, Rule, auto_degree

# The shapes this case offers: pytorch/fsdp's tiny one and the two Llama-3 shapes measured on GPUs.
CONFIGS = ("tiny", "llama3_2_1b", "llama3_1_8b")
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
class TrainConfig(LlamaRunConfig):
    """One run; the defaults are the tiny run the manifest launches (on one GPU)."""

    CONFIGS: ClassVar[tuple[str, ...]] = CONFIGS
    DESCRIPTION: ClassVar[str] = "trainstack megatron/gpt: megatron-core's GPTModel"

    tp: int = 1
    pp: int = 1
    dp: str = "auto"
    sequence_parallel: str = "false"
    distributed_optimizer: str = "false"
    recompute: str = "none"
    precision: str = "bf16"
    validate_only: str = "false"
    preflight: str = "false"

    def dp_degree(self, world_size: int) -> int:
        """``auto``: every rank that tensor and pipeline parallelism leave over replicates the model."""
        return auto_degree(self.dp, world_size, self.tp * self.pp)

    def micro_batches(self) -> int:
        """One micro-batch per row under pipeline parallelism (the schedule overlaps them), else one."""
        return self.batch_size if self.pp > 1 else 1

    def rule_groups(self, world_size: int, environ: Mapping[str, str]) -> list[Callable[[], Iterable[Rule]]]:
        """The shared rules and this case's values first: the degree rules read them (an unparsable --dp
        must fail on its own rule)."""
        del environ  # megatron-core's rules read no variable of the node
        return [
            self.run_rules,
            self._value_rules,
            self.checkpoint_rules,
            self._degree_rules,
            lambda: self._parallel_rules(world_size),
        ]

    def _value_rules(self) -> list[Rule]:
        return [
            (
                self.warmup_steps < self.steps,
                f"--warmup-steps {self.warmup_steps} must be below --steps {self.steps} (megatron-core's "
                "schedule decays over the steps after the warm-up)",
            ),
            self.clip_rule(),
            (self.device in ("auto", "cuda", "cpu"), f"--device must be auto, cuda or cpu: {self.device!r}"),
            (
                self.device != "cpu" or self.preflight == "true",
                f"--device cpu is refused: {CUDA_ONLY} (--preflight true runs what comes before them on CPU)",
            ),
            self.one_of("recompute", RECOMPUTE),
            (
                self.precision in PRECISIONS,
                f"--precision must be one of {PRECISIONS}, got {self.precision!r} (float8 needs Transformer "
                "Engine, which this test case does not install)",
            ),
        ]

    def _degree_rules(self) -> list[Rule]:
        return [
            self.degree_rule("dp"),
            self.at_least("tp", 1),
            self.at_least("pp", 1),
            *self.flag_rules(*FLAGS),
        ]

    def _parallel_rules(self, world: int) -> list[Rule]:
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


def build_parser() -> argparse.ArgumentParser:
    """This case's options (the launcher reads them from ``--help``)."""
    return TrainConfig.build_parser()


def parse_args(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> TrainConfig:
    """Parse and check every rule (the degrees against ``WORLD_SIZE``); a broken one exits with status 2."""
    return TrainConfig.parse(argv, environ)
