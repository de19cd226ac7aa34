"""Name mapping to and from Hugging Face ``LlamaForCausalLM`` state dicts.

Both sides store rotary embeddings in the half-split layout, so conversion is a pure renaming: no weight is
permuted. Used by the numerics tests (same weights in both implementations) and by anyone who wants to start
from a published checkpoint.
"""

from __future__ import annotations

import torch

from .config import ModelConfig

_BLOCK = {
    "attention.wq.weight": "self_attn.q_proj.weight",
    "attention.wk.weight": "self_attn.k_proj.weight",
    "attention.wv.weight": "self_attn.v_proj.weight",
    "attention.wo.weight": "self_attn.o_proj.weight",
    "feed_forward.w1.weight": "mlp.gate_proj.weight",
    "feed_forward.w2.weight": "mlp.down_proj.weight",
    "feed_forward.w3.weight": "mlp.up_proj.weight",
    "attention_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
}


def hf_key(ours: str) -> str:
    """Our parameter name to Hugging Face's."""
    if ours == "tok_embeddings.weight":
        return "model.embed_tokens.weight"
    if ours == "norm.weight":
        return "model.norm.weight"
    if ours == "output.weight":
        return "lm_head.weight"
    _, index, rest = ours.split(".", 2)
    return f"model.layers.{index}.{_BLOCK[rest]}"


def to_hf(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename a (full, unsharded) state dict of ours to Hugging Face's names."""
    return {hf_key(name): tensor for name, tensor in state.items()}


def from_hf(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Inverse of :func:`to_hf`; a tied model's missing ``lm_head`` is taken from the embedding."""
    reverse = {hf_key(ours): ours for ours in _our_names(cfg)}
    out = {reverse[name]: tensor for name, tensor in state.items() if name in reverse}
    if cfg.tie_embeddings:
        out.setdefault("output.weight", out["tok_embeddings.weight"])
    missing = sorted(set(_our_names(cfg)) - set(out))
    if missing:
        raise KeyError(f"Hugging Face state dict lacks weights for: {', '.join(missing[:5])}")
    return out


def _our_names(cfg: ModelConfig) -> list[str]:
    names = ["tok_embeddings.weight", "norm.weight", "output.weight"]
    for i in range(cfg.n_layers):
        names.extend(f"layers.{i}.{rest}" for rest in _BLOCK)
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
