"""optax's AdamW with pytorch/fsdp's schedule and clipping, and the jitted training step.

pytorch/fsdp's choices, so the two cases train alike: linear warm-up over ``--warmup-steps`` then cosine decay
to ``--min-lr-ratio`` of ``--lr`` at ``--steps``, a function of the step only (a resumed run needs nothing
else); gradients clipped to ``--grad-clip`` by their global norm, which is reported before clipping; decoupled
weight decay on the matrices, none on the norm gains. The step donates the state, so the update happens in
place on each device.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding, PartitionSpec
from trainstack_train.config import ModelConfig

from .config import TrainConfig
from .model import Params, loss_fn
from .shapes import NORMS

State = dict[str, Any]


def lr_at(cfg: TrainConfig, step: int) -> float:
    """The learning rate of ``step`` (0-based), on the host, for the metric line."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps))
    return cfg.lr * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def schedule(cfg: TrainConfig) -> Callable[[jax.Array], jax.Array]:
    """:func:`lr_at` traced: optax passes the update count, which is the step."""

    def rate(count: jax.Array) -> jax.Array:
        step = count.astype(jnp.float32)
        warm = cfg.lr * (step + 1) / max(1, cfg.warmup_steps)
        progress = jnp.minimum(1.0, (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps))
        ratio = cfg.min_lr_ratio
        cosine = cfg.lr * (ratio + (1.0 - ratio) * 0.5 * (1.0 + jnp.cos(jnp.pi * progress)))
        return jnp.where(step < cfg.warmup_steps, warm, cosine)

    return rate


def decay_mask(params: Params) -> Params:
    """True for the matrices, False for the norm gains (no weight decay on them)."""
    mask = jax.tree.map(lambda _leaf: True, params)
    mask["norm"] = False
    for name in NORMS:
        mask["layers"][name] = False
    return mask


def optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
    """Clip by global norm, then AdamW (eps 1e-8, torch's default)."""
    adamw = optax.adamw(
        schedule(cfg), b1=cfg.beta1, b2=cfg.beta2, eps=1e-8, weight_decay=cfg.weight_decay, mask=decay_mask
    )
    return optax.chain(optax.clip_by_global_norm(cfg.grad_clip), adamw)


def make_step(
    cfg: TrainConfig,
    tx: optax.GradientTransformation,
    compute: jnp.dtype,
    attention: str | None,
    mesh: jax.sharding.Mesh,
    state_shardings: Any,
) -> Callable[[State, jax.Array, jax.Array], tuple[State, jax.Array]]:
    """``step(state, tokens, table) -> (state, [loss, grad_norm])``, jitted, the state donated.

    The new state keeps the old one's shardings (named, so XLA reuses the donated buffers in place).
    """
    shape: ModelConfig = cfg.model
    objective = partial(
        loss_fn, cfg=shape, mesh=mesh, compute=compute, attention=attention, remat=cfg.remat == "full"
    )

    def step(state: State, tokens: jax.Array, table: jax.Array) -> tuple[State, jax.Array]:
        loss, grads = jax.value_and_grad(objective)(state["params"], tokens, table)
        norm = optax.global_norm(grads)
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        return {"params": params, "opt_state": opt_state}, jnp.stack((loss, norm)).astype(jnp.float32)

    return jax.jit(
        step, donate_argnums=(0,), out_shardings=(state_shardings, NamedSharding(mesh, PartitionSpec()))
    )
