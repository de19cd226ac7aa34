"""``jax.distributed`` from torchrun's environment, the device mesh, and where the process runs.

The launcher starts every test case with torchrun (``python -m torch.distributed.run``), one process per GPU
(one per node on CPU), and torchrun exports ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` to each. JAX's own cluster detection reads Slurm's task variables, which
describe one task per node here (torchrun is the task), so the entrypoint takes torchrun's: rank and world as
JAX's process id and count, and ``MASTER_ADDR`` (rank 0's host) as the coordinator. ``MASTER_PORT`` is
torchrun's own store there, so the coordinator listens on the next port unless ``--coordinator-port`` names
one. The process holds one device: GPU ``LOCAL_RANK`` of its node, or the CPU, whose collectives between
processes go through gloo.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .config import TrainConfig

# The batch's leading axis is split over both mesh axes: every device trains on its own rows.
BATCH_AXES = ("dp", "fsdp")


@dataclass(frozen=True)
class Processes:
    """This process's place in the job, from torchrun's variables (one process when they are absent)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    coordinator: str | None

    @property
    def nodes(self) -> int:
        """Nodes of the job: processes over processes per node (pytorch/fsdp's count)."""
        return max(1, self.world_size // max(1, self.local_world_size))

    @property
    def is_main(self) -> bool:
        """Rank 0 prints the metric lines and writes the summary."""
        return self.rank == 0


def processes(environ: Mapping[str, str], coordinator_port: int = 0) -> Processes:
    """Read torchrun's variables; the coordinator is ``MASTER_ADDR`` at ``MASTER_PORT + 1`` by default."""
    world = int(environ.get("WORLD_SIZE", "1"))
    coordinator = None
    if world > 1:
        host = environ.get("MASTER_ADDR")
        port = environ.get("MASTER_PORT")
        if not host or not (port or coordinator_port):
            raise RuntimeError(
                "jax/llama: WORLD_SIZE > 1 without MASTER_ADDR and MASTER_PORT: start it with torchrun"
            )
        coordinator = f"{host}:{coordinator_port or int(port or 0) + 1}"
    return Processes(
        rank=int(environ.get("RANK", "0")),
        world_size=world,
        local_rank=int(environ.get("LOCAL_RANK", "0")),
        local_world_size=int(environ.get("LOCAL_WORLD_SIZE", "1")),
        coordinator=coordinator,
    )


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
