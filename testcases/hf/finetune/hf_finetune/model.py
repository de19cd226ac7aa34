"""The transformers model (from a directory or with random weights of a named shape) and its LoRA adapters.

FLOPs per token, counted from the shared formula (``trainstack_train.metrics``) ``6N + 12 * n_layers * dim *
seq_len`` so that the figures compare with the other cases: every weight still computes its forward (2 per
weight) and passes the gradient back to its input (2 per weight), but a frozen weight computes no gradient of
its own (the 2 per weight that full training spends there), so the count is ``6N + 12 * n_layers * dim *
seq_len - 2 N_frozen`` = ``4 N_frozen + 6 N_lora + 12 * n_layers * dim * seq_len``. ``N_frozen`` is the base
model's unique parameter count (a tied embedding once), ``N_lora`` the adapters'. Conventions kept from the
shared formula: the embedding counts like a matrix product, the first layer's input gradient counts although
nothing needs it, and the LoRA scaling and dropout are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from trainstack_train.config import MODEL_CONFIGS, ModelConfig
from trainstack_train.hf_compat import hf_config_kwargs
from trainstack_train.metrics import flops_per_token

from .config import TrainConfig

# The decoder block FSDP2 shards one by one (accelerate's transformer_based_wrap).
BLOCK_CLASS = "LlamaDecoderLayer"


@dataclass(frozen=True)
class Counts:
    """Parameter counts the FLOP formula and the summary need."""

    frozen: int
    trainable: int

    def flops_per_token(self, shape: ModelConfig, seq_len: int) -> float:
        """The module docstring's count: the shared formula less the frozen weights' own gradients."""
        return flops_per_token(shape, self.frozen + self.trainable, seq_len) - 2.0 * self.frozen


def unique_params(model: nn.Module) -> int:
    """Parameters counted once each (``parameters()`` already skips the second name of a tied weight)."""
    return sum(p.numel() for p in model.parameters())


def random_llama(name: str, seed: int, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """transformers' ``LlamaForCausalLM`` at a named shape, random weights (transformers' init, seeded)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(**hf_config_kwargs(MODEL_CONFIGS[name]))
    with torch.device(device):
        model = LlamaForCausalLM(config)
    return model.to(dtype)


def base_model(cfg: TrainConfig, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """``--model-path`` loaded by transformers, or random weights of ``--init-config`` (seeded)."""
    if cfg.init_config:
        return random_llama(cfg.init_config, cfg.seed, device, dtype)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        str(Path(cfg.model_path)), dtype=dtype, attn_implementation="sdpa", local_files_only=True
    )
    return model.to(device)


def build(cfg: TrainConfig, device: torch.device, dtype: torch.dtype) -> tuple[nn.Module, Counts]:
    """The base model frozen, PEFT's LoRA adapters on ``--lora-targets``; the adapters' init is seeded."""
    from peft import LoraConfig, get_peft_model

    model = base_model(cfg, device, dtype)
    model.config.use_cache = False
    frozen = unique_params(model)
    if cfg.gradient_checkpointing == "true":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    torch.manual_seed(cfg.seed + 1)
    lora = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=cfg.targets,
        bias="none",
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(model, lora)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return model, Counts(frozen=frozen, trainable=trainable)
