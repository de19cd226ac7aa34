"""Conversion to and from Hugging Face ``LlamaForCausalLM`` state dicts.

Both sides store rotary embeddings in the half-split layout, so no weight is ever permuted. Most weights are
only renamed; our fused attention projection ``wqkv`` is q, k and v concatenated along dim 0, so it is split
going out and concatenated coming in. Splitting needs the head counts, which is why both directions take
the :class:`ModelConfig`. Used by the numerics tests (same weights in both implementations) and by anyone who
wants to start from a published checkpoint.
"""

from __future__ import annotations

import torch

from .config import ModelConfig

_RENAMED = {
    "attention.wo.weight": "self_attn.o_proj.weight",
    "feed_forward.w1.weight": "mlp.gate_proj.weight",
    "feed_forward.w2.weight": "mlp.down_proj.weight",
    "feed_forward.w3.weight": "mlp.up_proj.weight",
    "attention_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
}
_TOP = {
    "tok_embeddings.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
# Fused weight of ours -> Hugging Face's parts, in the order they are stacked along dim 0.
_FUSED = {
    "attention.wqkv.weight": (
        "self_attn.q_proj.weight",
        "self_attn.k_proj.weight",
        "self_attn.v_proj.weight",
    ),
}


def _split_sizes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Rows of each part of a fused weight, in stacking order (must match :mod:`trainstack_train.model`)."""
    kv = cfg.n_kv_heads * cfg.head_dim
    return {
        "attention.wqkv.weight": (cfg.n_heads * cfg.head_dim, kv, kv),
    }


def hf_keys(ours: str) -> tuple[str, ...]:
    """Hugging Face's weights that make up one of ours: one if it is renamed, the parts if it is fused."""
    if ours in _TOP:
        return (_TOP[ours],)
    _, index, rest = ours.split(".", 2)
    parts = _FUSED[rest] if rest in _FUSED else (_RENAMED[rest],)
    return tuple(f"model.layers.{index}.{hf}" for hf in parts)


def to_hf(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """A (full, unsharded) state dict of ours in Hugging Face's names and layout.

    The parts of a fused weight are views of its dim-0 slices (no copy); clone them before handing them to a
    writer, such as safetensors, that refuses tensors sharing storage.
    """
    sizes = _split_sizes(cfg)
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        keys = hf_keys(name)
        if len(keys) == 1:
            out[keys[0]] = tensor
        else:
            parts = torch.split(tensor, sizes[name.split(".", 2)[2]], dim=0)
            out.update(zip(keys, parts, strict=True))
    return out


def from_hf(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Inverse of :func:`to_hf`; a tied model's missing ``lm_head`` is taken from the embedding.

    Every absent weight is named in one ``KeyError`` up front, so a wrong checkpoint never loads partially.
    """
    if cfg.tie_embeddings and "lm_head.weight" not in state and "model.embed_tokens.weight" in state:
        state = {**state, "lm_head.weight": state["model.embed_tokens.weight"]}
    needed = {ours: hf_keys(ours) for ours in _our_names(cfg)}
    missing = [key for keys in needed.values() for key in keys if key not in state]
    if missing:
        raise KeyError(f"Hugging Face state dict lacks {len(missing)} weights: {', '.join(missing[:5])}")
    return {
        ours: state[keys[0]] if len(keys) == 1 else torch.cat([state[key] for key in keys], dim=0)
        for ours, keys in needed.items()
    }


def _our_names(cfg: ModelConfig) -> list[str]:
    names = list(_TOP)
    for i in range(cfg.n_layers):
        names.extend(f"layers.{i}.{rest}" for rest in (*_RENAMED, *_FUSED))
    return names


def hf_config_kwargs(cfg: ModelConfig) -> dict[str, object]:
    """Arguments for ``transformers.LlamaConfig`` describing the same shape."""
    rope_parameters: dict[str, object] = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling:
        rope_parameters = {"rope_type": "llama3", "rope_theta": cfg.rope_theta, **cfg.rope_scaling}
        rope_parameters["original_max_position_embeddings"] = int(
            cfg.rope_scaling["original_max_position_embeddings"]
        )
    return {
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.dim,
        "intermediate_size": cfg.ffn_dim,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "rms_norm_eps": cfg.norm_eps,
        "max_position_embeddings": cfg.max_seq_len,
        "tie_word_embeddings": cfg.tie_embeddings,
        "rope_parameters": rope_parameters,
        "attention_bias": False,
        "mlp_bias": False,
    }
