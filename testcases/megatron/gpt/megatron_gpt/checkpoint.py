"""Checkpoints with automatic resume: one ``torch.save`` file per rank under ``<dir>/step-N``.

Why not megatron-core's ``dist_checkpointing.save``: on a one-process CPU probe its torch_dist writer's
worker process failed (EOFError) and the save then hung for minutes; a test case must not hang on its own
checkpoint. Why not plain ``torch.distributed.checkpoint`` either: megatron-core's tensor-parallel shards are
ordinary tensors with the same key on every TP rank (its ``sharded_state_dict`` is what tells them apart,
and that is dist_checkpointing's format again), so DCP would take them for replicas. A file per rank holds
exactly that rank's model stage and shard, optimizer and schedule; under the distributed optimizer
megatron-core's own ``save_parameter_state`` gathers the sharded Adam state on each DP group's first rank.
A save is written to ``step-N.tmp`` and renamed by rank 0 after every rank finished, so a resume only ever
sees whole checkpoints; the same degrees are needed to resume (the files are per rank).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist

STEP_DIR = re.compile(r"^step-(\d+)$")


class Stateful(Protocol):
    """Anything with torch's ``state_dict``/``load_state_dict`` pair."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state_dict: Any) -> Any: ...


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def latest_step(root: Path) -> int:
    """The highest complete ``step-N`` under ``root``; 0 when there is none (a fresh start)."""
    if not root.is_dir():
        return 0
    steps = [int(match.group(1)) for p in root.iterdir() if p.is_dir() and (match := STEP_DIR.match(p.name))]
    return max(steps, default=0)


def save(root: Path, step: int, states: dict[str, Stateful], param_state: Any = None) -> Path:
    """Every rank writes its file, then rank 0 publishes the directory; returns the published path."""
    staging, final = root / f"step-{step}.tmp", root / f"step-{step}"
    rank = _rank()
    if rank == 0:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    _barrier()
    body = {name: obj.state_dict() for name, obj in states.items()} | {"step": step}
    torch.save(body, staging / f"rank-{rank:05d}.pt")
    if param_state is not None:
        param_state.save_parameter_state(str(staging / f"param-state-{rank:05d}.pt"))
    _barrier()
    if rank == 0:
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)
    _barrier()
    return final


def load(root: Path, step: int, states: dict[str, Stateful], param_state: Any = None) -> int:
    """Load this rank's file of ``step-N`` into ``states``; returns the step it holds."""
    directory = root / f"step-{step}"
    rank = _rank()
    path = directory / f"rank-{rank:05d}.pt"
    if not path.is_file():
        raise FileNotFoundError(
            f"--checkpoint-dir {root}: {path.name} missing in {directory.name} (resume needs the degrees and "
            "world size that wrote it)"
        )
    body = torch.load(path, map_location="cpu", weights_only=False)
    for name, obj in states.items():
        obj.load_state_dict(body[name])
    if param_state is not None:
        # megatron-core reads the file on DP rank 0 of each group and scatters: name the one that rank wrote.
        param_state.load_parameter_state(str(_param_state_file(directory)))
    return int(body["step"])


def _param_state_file(directory: Path) -> Path:
    """The parameter-state file of this rank's DP group (written by its first rank)."""
    from megatron.core import parallel_state

    ranks = dist.get_process_group_ranks(parallel_state.get_data_parallel_group())
    return directory / f"param-state-{min(ranks):05d}.pt"
