"""The run: mesh, state (initialised or restored), steps, pytorch/fsdp's metric lines, checkpoints, summary.

What is printed and written is ``trainstack_train.metrics``'s (the FLOP formula, the ``TRAINSTACK_METRIC``
line, the summary), so ``training_job`` parses this case as it parses pytorch/fsdp. As there, a step's loss is
read one step later: JAX dispatches a step and returns at once, so the host reads the previous step's loss
while the device runs the current one; the last line, and the one before each checkpoint, carry the loss with
null rates (only the tail of that step was timed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec
from trainstack_train.metrics import (
    Placement,
    StepTimer,
    Summary,
    finish_run,
    flops_per_token,
    now,
    peak_rss_gb,
    report,
    run_steps,
    step_record,
)

from .config import TrainConfig
from .data import Rows
from .dist import barrier, batch_sharding, initialize, make_mesh
from .launch import Processes
from .model import init_params, rope_table, shardings
from .shapes import num_params
from .train_step import State, lr_at, make_step, optimizer

if TYPE_CHECKING:
    from .checkpoint import Checkpoints

TESTCASE = "jax/llama"
DTYPES = {"bf16": jnp.bfloat16, "fp32": jnp.float32}


def compute_dtype(cfg: TrainConfig, kind: str) -> str:
    """``auto``: bf16 on GPU, fp32 on CPU."""
    if cfg.compute_dtype != "auto":
        return cfg.compute_dtype
    return "bf16" if kind == "cuda" else "fp32"


def attention_impl(cfg: TrainConfig, kind: str) -> str:
    """``auto``: cuDNN's fused attention on GPU, XLA's elsewhere."""
    if cfg.attention != "auto":
        return cfg.attention
    return "cudnn" if kind == "cuda" else "xla"


def peak_memory_gb(kind: str) -> float:
    """The device's peak bytes in use on GPU, the process's peak RSS on CPU, in GB (1e9 bytes)."""
    if kind == "cuda":
        stats = jax.local_devices()[0].memory_stats() or {}
        return stats.get("peak_bytes_in_use", 0) / 1e9
    return peak_rss_gb()


@dataclass
class Run:
    """One invocation's objects and records."""

    cfg: TrainConfig
    procs: Processes
    kind: str
    losses: list[float] = field(default_factory=list)
    pending: tuple[int, jax.Array, float] | None = None
    clock: float | None = None

    def __post_init__(self) -> None:
        cfg, procs = self.cfg, self.procs
        self.mesh = make_mesh(cfg, procs.world_size)
        self.compute = compute_dtype(cfg, self.kind)
        self.attention = attention_impl(cfg, self.kind)
        self.params = num_params(cfg.model)
        self.tx = optimizer(cfg)
        self.state = self._initial_state()
        self.checkpoints: Checkpoints | None = None
        barrier("initialised")
        if cfg.checkpoint_dir:
            # orbax only where checkpoints are wanted: its import costs seconds and a dozen dependencies.
            from .checkpoint import Checkpoints

            self.checkpoints = Checkpoints(cfg.checkpoint_dir)
        latest = self.checkpoints.latest() if self.checkpoints else None
        self.start_step = 0
        if self.checkpoints and latest is not None:
            self.state = self.checkpoints.restore(latest, self.state)
            self.start_step = latest
        replicated = NamedSharding(self.mesh, PartitionSpec())
        state_shardings = jax.tree.map(lambda array: array.sharding, self.state)
        step_fn = make_step(cfg, self.tx, DTYPES[self.compute], self.attention, self.mesh, state_shardings)
        self.table = jax.device_put(rope_table(cfg.model, cfg.seq_len), replicated)
        shape = cfg.model
        self.rows = Rows(
            cfg.data, shape.vocab_size, cfg.batch_size, cfg.seq_len, procs.rank, procs.world_size, cfg.seed
        )
        self.sharding = batch_sharding(self.mesh)
        # Compiled before the first step, and the processes meet after it (see dist.barrier).
        tokens = jax.ShapeDtypeStruct(
            (cfg.batch_size * procs.world_size, cfg.seq_len + 1), jnp.int32, sharding=self.sharding
        )
        self.step_fn = step_fn.lower(self.state, tokens, self.table).compile()
        barrier("compiled")
        self.tokens_per_step = cfg.batch_size * cfg.seq_len * procs.world_size
        self.flops_token = flops_per_token(cfg.model, self.params, cfg.seq_len)
        self.timer = StepTimer(cfg.metric_warmup_steps, self.tokens_per_step)

    def _initial_state(self) -> State:
        """Parameters drawn shard by shard where they live, the optimizer state placed beside them."""
        cfg = self.cfg
        param_shardings = shardings(cfg.model, self.mesh)
        dtype = DTYPES[cfg.param_dtype]
        init = jax.jit(lambda key: init_params(cfg.model, key, dtype), out_shardings=param_shardings)
        params = init(jax.random.key(cfg.seed))
        # Adam's moments sharded as their parameters, the step count replicated: named, so that every leaf
        # of the state spans the mesh (a jitted step refuses a mix of meshes and single devices).
        replicated = NamedSharding(self.mesh, PartitionSpec())
        opt_shardings = optax.tree_utils.tree_map_params(
            self.tx,
            lambda _param, sharding: sharding,
            jax.eval_shape(self.tx.init, params),
            param_shardings,
            transform_non_params=lambda _leaf: replicated,
        )
        opt_state = jax.jit(self.tx.init, out_shardings=opt_shardings)(params)
        return {"params": params, "opt_state": opt_state}

    def step(self, step: int) -> dict[str, Any] | None:
        """Dispatch one step; return the record of the previous one (read now, while this one runs)."""
        if self.clock is None:
            self.clock = now()
        local = self.rows.batch(step)
        global_rows = (local.shape[0] * self.procs.world_size, local.shape[1])
        tokens = jax.make_array_from_process_local_data(self.sharding, local, global_rows)
        self.state, stats = self.step_fn(self.state, tokens, self.table)
        record = self.finish()
        self.pending = (step, stats, lr_at(self.cfg, step))
        return record

    def finish(self, timed: bool = True) -> dict[str, Any] | None:
        """The queued step's record; ``timed=False`` for a flush (only the tail of the step was timed)."""
        if self.pending is None:
            return None
        step, stats, lr = self.pending
        self.pending = None
        loss_value, grad_norm = (float(v) for v in np.asarray(stats))
        rates = (self.procs.world_size, self.cfg.peak_tflops)
        return step_record(
            self, step, (loss_value, grad_norm, lr), timed, rates, lambda: peak_memory_gb(self.kind)
        )

    def save(self, step: int) -> None:
        """Every process writes its shards; excluded from the next step's time."""
        assert self.checkpoints is not None
        self.checkpoints.save(step, self.state)
        self.clock = None


def _version(distribution: str) -> str | None:
    """An installed distribution's version, None when absent (orbax on a run without checkpoints)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def train(cfg: TrainConfig) -> Summary:
    """Run to ``--steps`` (or ``--max-steps-this-run`` more) and write the summary on rank 0."""
    t_start = now()
    procs, kind = initialize(cfg)
    run = Run(cfg, procs, kind)
    last = run_steps(cfg, run, procs.is_main, run.save if run.checkpoints else None)
    report(run.finish(timed=False), procs.is_main)
    if run.checkpoints:
        run.checkpoints.close()
    device = jax.local_devices()[0]
    where = Placement(
        world_size=procs.world_size,
        nodes=procs.nodes,
        device=run.kind,
        gpu_model=getattr(device, "device_kind", None) if run.kind == "cuda" else None,
        is_main=procs.is_main,
        peak_mem_gb=lambda: peak_memory_gb(run.kind),
    )
    return finish_run(
        TESTCASE,
        cfg,
        run,
        where,
        last=last,
        t_start=t_start,
        params=run.params,
        extra={
            "config": cfg.config,
            "dp": cfg.dp,
            "fsdp": cfg.fsdp_degree(procs.world_size),
            "param_dtype": cfg.param_dtype,
            "compute_dtype": run.compute,
            "attention": run.attention,
            "remat": cfg.remat,
            **{
                name.replace("-", "_"): _version(name)
                for name in ("jax", "jaxlib", "optax", "orbax-checkpoint")
            },
        },
    )
