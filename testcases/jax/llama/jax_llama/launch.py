"""This process's place in the job, read from torchrun's environment (no jax: tested and used before it).

The launcher starts every test case with torchrun (``python -m torch.distributed.run``), one process per GPU
(one per node on CPU), and torchrun exports ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR`` and ``MASTER_PORT`` to each. JAX's own cluster detection reads Slurm's task variables, which
describe one task per node here (torchrun is the task), so the case takes torchrun's: rank and world as JAX's
process id and count, and ``MASTER_ADDR`` (rank 0's host) as the coordinator. ``MASTER_PORT`` is torchrun's
own store there, so the coordinator listens on the next port unless ``--coordinator-port`` names one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


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
