"""The parameters of one shape, without jax: one block's weights and the unique count (the FLOP formula's N).

Apart from :mod:`jax_llama.model` so that the count is checked, and used, where jax is not installed.
"""

from __future__ import annotations

import math

from trainstack_train.config import ModelConfig

# The block's weights with their shapes (a function of the model shape) and their init scale.
NORMS = ("attn_norm", "ffn_norm")
OUTPUT_PROJECTIONS = ("wo", "w2")


def block_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """One block's weights, ``[in, out]`` for the matrices (``x @ w``)."""
    q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    return {
        "attn_norm": (cfg.dim,),
        "wq": (cfg.dim, q),
        "wk": (cfg.dim, kv),
        "wv": (cfg.dim, kv),
        "wo": (q, cfg.dim),
        "ffn_norm": (cfg.dim,),
        "w1": (cfg.dim, cfg.ffn_dim),
        "w3": (cfg.dim, cfg.ffn_dim),
        "w2": (cfg.ffn_dim, cfg.dim),
    }


def num_params(cfg: ModelConfig) -> int:
    """Unique parameters (a tied embedding once): pytorch/fsdp's count, for the FLOP formula."""
    block = sum(math.prod(shape) for shape in block_shapes(cfg).values())
    head = 0 if cfg.tie_embeddings else cfg.dim * cfg.vocab_size
    return cfg.vocab_size * cfg.dim + cfg.n_layers * block + cfg.dim + head
