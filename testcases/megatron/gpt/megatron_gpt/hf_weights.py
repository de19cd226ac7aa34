"""Hugging Face Llama weights in megatron-core's GPTModel layout (local layer spec, one tensor-parallel rank).

Why: the first-step loss of ``megatron/gpt`` can only be compared with ``pytorch/fsdp``'s when both networks
hold the same weights, and megatron-core initialises with its own scheme. ``pytorch/fsdp`` writes its weights
in Hugging Face's names (``trainstack_train.hf_compat.to_hf``), so this one conversion serves both that
comparison and a start from a published Llama checkpoint. Two weights change layout, nothing else:
megatron-core's fused ``linear_qkv`` stacks, per key/value group, that group's query heads, then its key head,
then its value head (``SelfAttention.get_query_key_value_tensors`` splits it that way), and its ``linear_fc1``
is the gate projection above the up projection (the gated linear unit's first half goes through SiLU). Rotary
embeddings are half-split on both sides, so no weight is permuted.
"""

from __future__ import annotations

import torch
from trainstack_train.config import ModelConfig

_LAYER = {
    "input_layernorm.weight": "input_layernorm.weight",
    "self_attn.o_proj.weight": "self_attention.linear_proj.weight",
    "post_attention_layernorm.weight": "pre_mlp_layernorm.weight",
    "mlp.down_proj.weight": "mlp.linear_fc2.weight",
}


def qkv_weight(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, shape: ModelConfig) -> torch.Tensor:
    """q, k and v projections as ``linear_qkv``: each key/value group's query heads, its key, its value."""
    groups, head = shape.n_kv_heads, shape.head_dim
    per_group = shape.n_heads // groups
    parts = (
        q.reshape(groups, per_group * head, -1),
        k.reshape(groups, head, -1),
        v.reshape(groups, head, -1),
    )
    return torch.cat(parts, dim=1).reshape(-1, q.shape[-1])


def from_hf(state: dict[str, torch.Tensor], shape: ModelConfig) -> dict[str, torch.Tensor]:
    """A full Hugging Face ``LlamaForCausalLM`` state dict as GPTModel's (``load_state_dict(strict=False)``
    then leaves only megatron-core's empty ``_extra_state`` entries unset).

    Every absent weight is named in one ``KeyError`` before anything is converted.
    """
    wanted = ["model.embed_tokens.weight", "model.norm.weight"]
    wanted += [] if shape.tie_embeddings else ["lm_head.weight"]
    for index in range(shape.n_layers):
        prefix = f"model.layers.{index}."
        wanted += [prefix + name for name in _LAYER]
        wanted += [f"{prefix}self_attn.{p}_proj.weight" for p in "qkv"]
        wanted += [f"{prefix}mlp.{p}_proj.weight" for p in ("gate", "up")]
    missing = [key for key in wanted if key not in state]
    if missing:
        raise KeyError(f"Hugging Face state dict lacks {len(missing)} weight(s), first {missing[:3]}")
    out = {
        "embedding.word_embeddings.weight": state["model.embed_tokens.weight"],
        "decoder.final_layernorm.weight": state["model.norm.weight"],
    }
    if not shape.tie_embeddings:
        out["output_layer.weight"] = state["lm_head.weight"]
    for index in range(shape.n_layers):
        hf, ours = f"model.layers.{index}.", f"decoder.layers.{index}."
        out.update({ours + name: state[hf + source] for source, name in _LAYER.items()})
        q, k, v = (state[f"{hf}self_attn.{p}_proj.weight"] for p in "qkv")
        out[ours + "self_attention.linear_qkv.weight"] = qkv_weight(q, k, v, shape)
        gate, up = state[f"{hf}mlp.gate_proj.weight"], state[f"{hf}mlp.up_proj.weight"]
        out[ours + "mlp.linear_fc1.weight"] = torch.cat([gate, up], dim=0)
    return out
