"""Arguments of ``hf/finetune`` and the rules between them, checked without torch or transformers.

Why no torch here: the launcher reads ``--help`` and runs ``--validate-only`` on the submit host before it
submits anything, so both must answer in a fraction of a second. The model directory's ``config.json`` is
plain JSON, so the rules that depend on the model (its family, its vocabulary, its context length) are
checked from it here too, before any process group exists.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainstack_train.config import MODEL_CONFIGS, ModelConfig, RunSchedule, options_parser, parse_options

# Shapes --init-config makes with random weights (pytorch/fsdp's, less the 70B one).
INIT_CONFIGS = ("tiny", "small", "llama3_2_1b", "llama3_1_8b")
# The projections of a Llama block that LoRA may adapt; all-linear is PEFT's word for all of them. The output
# layer (lm_head) is left out of all-linear, as PEFT does, and may be named as well: a model with random
# weights behind a frozen output layer and final norm can move its logits very little, so the tiny CPU run
# adapts it too.
BLOCK_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
TARGET_MODULES = (*BLOCK_MODULES, "lm_head")
ALL_LINEAR = "all-linear"
# The model families whose block layout (module names, FLOP count) this case knows.
MODEL_TYPES = ("llama",)
# Byte-level fallback: ids 0-255 are bytes, 256 BOS, 257 EOS (pytorch/fsdp's tokenizer).
BYTE_VOCAB = 258
BUILTIN_DATA = "builtin"
DATA_FILE = Path(__file__).resolve().parents[1] / "data" / "instructions.jsonl"
# Files whose presence in the model directory means transformers can load its tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
PRECISIONS = ("auto", "bf16", "fp32")


@dataclass
class TrainConfig(RunSchedule):
    """One run; the defaults are the tiny CPU run the manifest launches (LoRA: a higher rate, no decay)."""

    lr: float = 1e-2
    weight_decay: float = 0.0
    model_path: str = ""
    init_config: str = ""
    data: str = BUILTIN_DATA
    eval_fraction: float = 0.125
    lora_rank: int = 16
    lora_alpha: float = 32.0
    lora_dropout: float = 0.0
    lora_targets: str = ALL_LINEAR
    device: str = "auto"
    fsdp: str = "auto"
    precision: str = "auto"
    gradient_checkpointing: str = "false"
    checkpoint_dir: str = ""
    checkpoint_every: int = 0
    summary_json: str = ""
    metric_warmup_steps: int = 3
    max_steps_this_run: int = 0
    peak_tflops: float | None = None
    validate_only: str = "false"

    @property
    def targets(self) -> list[str] | str:
        """PEFT's ``target_modules``: ``all-linear`` alone as is, else the modules listed (expanded)."""
        names = [name.strip() for name in self.lora_targets.split(",") if name.strip()]
        if names == [ALL_LINEAR]:
            return ALL_LINEAR
        expanded = [part for name in names for part in (BLOCK_MODULES if name == ALL_LINEAR else (name,))]
        return list(dict.fromkeys(expanded))

    @property
    def data_file(self) -> Path:
        """The JSONL file: the one this case ships, or the given path."""
        return DATA_FILE if self.data == BUILTIN_DATA else Path(self.data)

    def use_fsdp(self, world_size: int) -> bool:
        """``auto``: FSDP2 when several processes share the model; one process trains it unsharded."""
        return self.fsdp == "true" or (self.fsdp == "auto" and world_size > 1)

    def validate(self) -> ModelConfig:
        """Each rule names the option it constrains; the first broken one is raised. Returns the shape."""
        for ok, message in self._value_rules():
            if not ok:
                raise ValueError(message)
        shape, has_tokenizer = self._model_rules()
        for ok, message in self._shape_rules(shape, has_tokenizer):
            if not ok:
                raise ValueError(message)
        return shape

    def _value_rules(self) -> list[tuple[bool, str]]:
        unknown = [t for t in self.targets if t not in TARGET_MODULES] if self.targets != ALL_LINEAR else []
        return [
            (self.steps >= 1, f"--steps must be >= 1, got {self.steps}"),
            (self.batch_size >= 1, f"--batch-size must be >= 1, got {self.batch_size}"),
            (self.seq_len >= 2, f"--seq-len must be >= 2, got {self.seq_len}"),
            (self.lr > 0, f"--lr must be > 0, got {self.lr}"),
            (0 <= self.min_lr_ratio <= 1, f"--min-lr-ratio must be in [0, 1], got {self.min_lr_ratio}"),
            (self.warmup_steps >= 0, f"--warmup-steps must be >= 0, got {self.warmup_steps}"),
            (self.weight_decay >= 0, f"--weight-decay must be >= 0, got {self.weight_decay}"),
            (self.grad_clip > 0, f"--grad-clip must be > 0, got {self.grad_clip}"),
            (
                0 < self.eval_fraction <= 0.5,
                f"--eval-fraction must be in (0, 0.5] (the held-out share of the records), "
                f"got {self.eval_fraction}",
            ),
            (
                self.lora_rank >= 1,
                f"--lora-rank must be >= 1, got {self.lora_rank}: LoRA trains rank x (in + out) weights per "
                "adapted projection, so rank 0 would train nothing",
            ),
            (self.lora_alpha > 0, f"--lora-alpha must be > 0, got {self.lora_alpha}"),
            (0 <= self.lora_dropout < 1, f"--lora-dropout must be in [0, 1), got {self.lora_dropout}"),
            (
                bool(self.targets) and not unknown,
                f"--lora-targets {self.lora_targets!r}: {unknown or 'empty'} not a linear layer of a Llama "
                f"model; give a comma-separated list of {ALL_LINEAR} (the block's projections) and "
                f"{list(TARGET_MODULES)}",
            ),
            (self.device in ("auto", "cpu", "cuda"), f"--device must be auto, cpu or cuda: {self.device!r}"),
            (self.fsdp in ("auto", "true", "false"), f"--fsdp must be auto, true or false: {self.fsdp!r}"),
            (
                self.precision in PRECISIONS,
                f"--precision must be one of {PRECISIONS}, got {self.precision!r}",
            ),
            (
                not (self.precision == "bf16" and self.device == "cpu"),
                "--precision bf16 needs a GPU (bf16 autocast on the CPU is slower than fp32 there); "
                "use --precision auto or fp32 with --device cpu",
            ),
            (
                self.gradient_checkpointing in ("true", "false"),
                "--gradient-checkpointing must be true or false",
            ),
            (self.checkpoint_every >= 0, f"--checkpoint-every must be >= 0, got {self.checkpoint_every}"),
            (
                not (self.checkpoint_every and not self.checkpoint_dir),
                "--checkpoint-every needs --checkpoint-dir",
            ),
            (self.metric_warmup_steps >= 0, "--metric-warmup-steps must be >= 0"),
            (self.max_steps_this_run >= 0, "--max-steps-this-run must be >= 0"),
            (
                self.data == BUILTIN_DATA or self.data_file.is_file(),
                f"--data {self.data!r} is not a file: give a JSONL file of instruction records or "
                f"{BUILTIN_DATA} (the records this case ships)",
            ),
            (self.validate_only in ("true", "false"), "--validate-only must be true or false"),
        ]

    def _model_rules(self) -> tuple[ModelConfig, bool]:
        """The model's shape, from ``--init-config`` or the directory's ``config.json``, and its tokenizer."""
        if bool(self.model_path) == bool(self.init_config):
            raise ValueError(
                "give one of --model-path DIR (a model directory in transformers' format) and --init-config "
                f"NAME (random weights of one of {list(INIT_CONFIGS)}), not "
                + ("both" if self.model_path else "neither")
            )
        if self.init_config:
            if self.init_config not in INIT_CONFIGS:
                raise ValueError(
                    f"--init-config {self.init_config!r} is unknown; choose one of {list(INIT_CONFIGS)}"
                )
            return MODEL_CONFIGS[self.init_config], False
        return read_model_dir(Path(self.model_path))

    def _shape_rules(self, shape: ModelConfig, has_tokenizer: bool) -> list[tuple[bool, str]]:
        source = (
            f"--init-config {self.init_config}" if self.init_config else f"--model-path {self.model_path}"
        )
        return [
            (
                self.seq_len <= shape.max_seq_len,
                f"--seq-len {self.seq_len} exceeds the model's context "
                f"({source}: {shape.max_seq_len} positions)",
            ),
            (
                has_tokenizer or shape.vocab_size >= BYTE_VOCAB,
                f"{source} has no tokenizer, and its vocabulary ({shape.vocab_size}) is smaller than the "
                f"byte-level fallback's {BYTE_VOCAB} ids",
            ),
        ]


def read_model_dir(path: Path) -> tuple[ModelConfig, bool]:
    """Check a transformers model directory from its files alone; its shape and whether it has a tokenizer."""
    where = f"--model-path {str(path)!r}"
    if not path.is_dir():
        raise ValueError(f"{where} is not a directory: give a local model directory in transformers' format")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ValueError(
            f"{where} has no config.json: a model directory in transformers' format (save_pretrained) "
            "is needed"
        )
    try:
        body = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"{where}: config.json is not JSON ({err})") from err
    if body.get("model_type") not in MODEL_TYPES:
        raise ValueError(
            f"{where}: model_type {body.get('model_type')!r} is not one this case fine-tunes "
            f"({list(MODEL_TYPES)}): "
            "the LoRA targets and the FLOP count are a Llama block's"
        )
    if not any((path / name).is_file() for name in WEIGHT_FILES):
        raise ValueError(f"{where} has no weights: none of {list(WEIGHT_FILES)} is there")
    return shape_from_hf(body, where), any((path / name).is_file() for name in TOKENIZER_FILES)


def shape_from_hf(body: Mapping[str, Any], where: str = "config.json") -> ModelConfig:
    """``trainstack_train``'s :class:`ModelConfig` of a Llama ``config.json``: what the FLOP formula reads."""
    try:
        heads = int(body["num_attention_heads"])
        shape = ModelConfig(
            dim=int(body["hidden_size"]),
            n_layers=int(body["num_hidden_layers"]),
            n_heads=heads,
            n_kv_heads=int(body.get("num_key_value_heads") or heads),
            vocab_size=int(body["vocab_size"]),
            ffn_dim=int(body["intermediate_size"]),
            max_seq_len=int(body.get("max_position_embeddings", 2048)),
            tie_embeddings=bool(body.get("tie_word_embeddings", False)),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{where}: config.json lacks or mistypes a Llama field ({err})") from err
    return shape


WORD_FIELDS = ("device", "fsdp", "precision", "gradient_checkpointing", "validate_only")


def build_parser() -> argparse.ArgumentParser:
    """One ``--kebab-case`` option per field, typed from its default (pytorch/fsdp's plumbing)."""
    return options_parser(
        TrainConfig, "trainstack hf/finetune: transformers + PEFT LoRA + accelerate", WORD_FIELDS
    )


def parse_args(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> TrainConfig:
    """Parse and check every rule; a broken one exits with status 2 and its message (argparse's way)."""
    env = os.environ if environ is None else environ
    return parse_options(build_parser(), TrainConfig, argv, env, TrainConfig.validate)
