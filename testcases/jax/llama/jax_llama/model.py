"""The Llama-3 decoder as pure functions of a parameter tree: initialisation, shardings, forward and loss.

Layers are stacked (a leading layer axis on every block weight) and run through ``jax.lax.scan``, so XLA
compiles one block, not ``n_layers`` copies (the compile time of the 8B shape stays that of one layer). The
network is pytorch/fsdp's: RMSNorm, rotary embeddings in the half-split layout with Llama 3.1's long-context
rescaling, grouped-query attention, SwiGLU, no biases, the output tied to the embedding where the shape says
so, and the same initialisation (normal with std 0.02, output projections scaled by ``1/sqrt(2 n_layers)``).

FSDP: each weight is sharded along its first non-layer dimension over the mesh's ``fsdp`` axis and replicated
over ``dp``; the activations are constrained to split their rows over both axes, so XLA's SPMD partitioner
all-gathers a weight where a block uses it and reduce-scatters its gradient, ZeRO-3's schedule.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from trainstack_train.config import ModelConfig

from .dist import BATCH_AXES
from .shapes import NORMS, OUTPUT_PROJECTIONS, block_shapes

Params = dict[str, Any]


def param_specs(cfg: ModelConfig) -> Params:
    """Partition specs: matrices split along their first dimension over ``fsdp``, norms replicated."""
    layers = {
        name: PartitionSpec(None) if name in NORMS else PartitionSpec(None, "fsdp", None)
        for name in block_shapes(cfg)
    }
    specs: Params = {"embed": PartitionSpec("fsdp", None), "layers": layers, "norm": PartitionSpec(None)}
    if not cfg.tie_embeddings:
        specs["output"] = PartitionSpec("fsdp", None)
    return specs


def shardings(cfg: ModelConfig, mesh: Mesh) -> Params:
    """The specs as shardings on ``mesh``."""
    return jax.tree.map(lambda spec: NamedSharding(mesh, spec), param_specs(cfg))


def init_params(cfg: ModelConfig, key: jax.Array, dtype: jnp.dtype) -> Params:
    """pytorch/fsdp's scheme; jitted with the shardings as outputs, every device draws only its shard."""
    std, out_std = 0.02, 0.02 / math.sqrt(2 * cfg.n_layers)
    shapes = block_shapes(cfg)
    keys = jax.random.split(key, len(shapes) + 2)
    layers = {}
    for index, (name, shape) in enumerate(shapes.items()):
        full = (cfg.n_layers, *shape)
        if name in NORMS:
            layers[name] = jnp.ones(full, dtype)
        else:
            scale = out_std if name in OUTPUT_PROJECTIONS else std
            layers[name] = (scale * jax.random.normal(keys[index], full, jnp.float32)).astype(dtype)
    params: Params = {
        "embed": (std * jax.random.normal(keys[-2], (cfg.vocab_size, cfg.dim), jnp.float32)).astype(dtype),
        "layers": layers,
        "norm": jnp.ones((cfg.dim,), dtype),
    }
    if not cfg.tie_embeddings:
        output = std * jax.random.normal(keys[-1], (cfg.dim, cfg.vocab_size), jnp.float32)
        params["output"] = output.astype(dtype)
    return params


def rope_frequencies(cfg: ModelConfig) -> np.ndarray:
    """Inverse frequencies in fp64, with Llama 3.1's piecewise rescaling where the shape has it."""
    inv_freq = 1.0 / (cfg.rope_theta ** (np.arange(0, cfg.head_dim, 2, dtype=np.float64) / cfg.head_dim))
    scaling = cfg.rope_scaling
    if not scaling:
        return inv_freq
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return np.where(medium, blended, scaled)


def rope_table(cfg: ModelConfig, seq_len: int) -> np.ndarray:
    """``[2, seq_len, head_dim]`` cos and sin in fp32 (the half-split layout: frequencies repeated)."""
    freqs = np.outer(np.arange(seq_len, dtype=np.float64), rope_frequencies(cfg))
    emb = np.concatenate((freqs, freqs), axis=-1)
    return np.stack((np.cos(emb), np.sin(emb))).astype(np.float32)


def _rope(x: jax.Array, table: jax.Array) -> jax.Array:
    """Rotate ``[batch, seq, heads, head_dim]`` by position."""
    cos = table[0][None, :, None, :].astype(x.dtype)
    sin = table[1][None, :, None, :].astype(x.dtype)
    first, second = jnp.split(x, 2, axis=-1)
    return x * cos + jnp.concatenate((-second, first), axis=-1) * sin


def _rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    """Normalise in fp32, return in the activation dtype."""
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (normed * weight.astype(jnp.float32)).astype(x.dtype)


def rows_sharding(mesh: Mesh) -> NamedSharding:
    """``[batch, seq, dim]`` activations split by rows over the whole mesh (FSDP gathers weights instead)."""
    return NamedSharding(mesh, PartitionSpec(BATCH_AXES, None, None))


Block = Callable[[jax.Array, Params, jax.Array], jax.Array]


def make_block(cfg: ModelConfig, attention: str | None, rows: NamedSharding) -> Block:
    """One decoder block for ``lax.scan``; ``attention`` is jax.nn.dot_product_attention's implementation."""

    def block(x: jax.Array, layer: Params, table: jax.Array) -> jax.Array:
        dtype = x.dtype
        bsz, seq, _width = x.shape
        h = _rms_norm(x, layer["attn_norm"], cfg.norm_eps)
        q = (h @ layer["wq"].astype(dtype)).reshape(bsz, seq, cfg.n_heads, cfg.head_dim)
        k = (h @ layer["wk"].astype(dtype)).reshape(bsz, seq, cfg.n_kv_heads, cfg.head_dim)
        v = (h @ layer["wv"].astype(dtype)).reshape(bsz, seq, cfg.n_kv_heads, cfg.head_dim)
        out = jax.nn.dot_product_attention(
            _rope(q, table), _rope(k, table), v, is_causal=True, implementation=attention
        )
        x = jax.lax.with_sharding_constraint(x + out.reshape(bsz, seq, -1) @ layer["wo"].astype(dtype), rows)
        h = _rms_norm(x, layer["ffn_norm"], cfg.norm_eps)
        gate = jax.nn.silu(h @ layer["w1"].astype(dtype)) * (h @ layer["w3"].astype(dtype))
        return jax.lax.with_sharding_constraint(x + gate @ layer["w2"].astype(dtype), rows)

    return block


def loss_fn(
    params: Params,
    tokens: jax.Array,
    table: jax.Array,
    cfg: ModelConfig,
    mesh: Mesh,
    compute: jnp.dtype,
    attention: str | None,
    remat: bool,
) -> jax.Array:
    """Mean next-token cross-entropy over the global batch; ``tokens`` is ``[rows, seq_len + 1]``."""
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    rows = rows_sharding(mesh)
    x = jax.lax.with_sharding_constraint(jnp.take(params["embed"].astype(compute), inputs, axis=0), rows)
    block = make_block(cfg, attention, rows)
    if remat:
        block = jax.checkpoint(block, policy=jax.checkpoint_policies.nothing_saveable)

    def body(carry: jax.Array, layer: Params) -> tuple[jax.Array, None]:
        return block(carry, layer, table), None

    x, _unused = jax.lax.scan(body, x, params["layers"])
    x = _rms_norm(x, params["norm"], cfg.norm_eps)
    head = params["embed"].T if cfg.tie_embeddings else params["output"]
    logits = (x @ head.astype(compute)).astype(jnp.float32)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - picked)
