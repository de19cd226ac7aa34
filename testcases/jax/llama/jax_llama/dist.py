"""``jax.distributed`` from torchrun's environment (:mod:`jax_llama.launch`), the device mesh, the platform.

Each process holds one device: GPU ``LOCAL_RANK`` of its node, or the CPU, whose collectives between processes
go through gloo.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .config import TrainConfig
from .launch import Processes, processes

# The batch's leading axis is split over both mesh axes: every device trains on its own rows.
BATCH_AXES = ("dp", "fsdp")


def initialize(cfg: TrainConfig, environ: Mapping[str, str] | None = None) -> tuple[Processes, str]:
    """Configure the backends, join the job's processes, and say where this one computes (``cpu``/``cuda``).

    Everything here happens before the first array exists, as ``jax.distributed.initialize`` requires.
    """
    procs = processes(os.environ if environ is None else environ, cfg.coordinator_port)
    if cfg.device == "cpu":
        jax.config.update("jax_platforms", "cpu")
    else:
        # One GPU per process, as torchrun places them; a one-process run takes the first.
        jax.config.update("jax_cuda_visible_devices", str(procs.local_rank))
    # CPU arrays of several processes meet through gloo (the default, none, refuses any collective).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if procs.world_size > 1:
        jax.distributed.initialize(
            coordinator_address=procs.coordinator, num_processes=procs.world_size, process_id=procs.rank
        )
    kind = "cuda" if jax.default_backend() == "gpu" else "cpu"
    if cfg.device == "cuda" and kind != "cuda":
        raise RuntimeError(f"jax/llama: --device cuda, but JAX's backend is {jax.default_backend()}")
    return procs, kind


def barrier(name: str, timeout_s: float = 900.0) -> None:
    """Wait until every process got here, through the coordinator (no collective, so no gloo).

    Why: gloo's context between CPU processes is made on the first collective and gives up after 30 s, and
    processes that compile at different speeds (a busy node) can be further apart than that. The processes
    meet here, with a generous limit, right before the collectives of a checkpoint or a step.
    """
    if jax.process_count() == 1:
        return
    from jax._src import distributed

    client = distributed.global_state.client
    assert client is not None
    client.wait_at_barrier(f"jax_llama:{name}", int(timeout_s * 1000))


def make_mesh(cfg: TrainConfig, world_size: int) -> Mesh:
    """``(dp, fsdp)`` over every device of the job, in process order (the validated degrees)."""
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    fsdp = cfg.fsdp_degree(world_size)
    if len(devices) != cfg.dp * fsdp:
        raise RuntimeError(
            f"jax/llama: the mesh --dp {cfg.dp} x --fsdp {fsdp} needs {cfg.dp * fsdp} devices, "
            f"JAX sees {len(devices)} ({jax.process_count()} process(es))"
        )
    return Mesh(np.array(devices).reshape(cfg.dp, fsdp), ("dp", "fsdp"))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Rows over every device, the sequence whole."""
    return NamedSharding(mesh, PartitionSpec(BATCH_AXES, None))
