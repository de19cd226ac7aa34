"""Checkpoints with automatic resume: one ``torch.save`` file per rank under ``<dir>/step-N``.

Why not megatron-core's ``dist_checkpointing.save``: on a one-process CPU probe its torch_dist writer's
worker process failed (EOFError) and the save then hung for minutes; a test case must not hang on its own
checkpoint. Why not plain ``torch.distributed.checkpoint`` either: megatron-core's tensor-parallel shards are
ordinary tensors with the same key on every TP rank (its ``sharded_state_dict`` is what tells them apart,
and that is dist_checkpointing's format again), so DCP would take them for replicas. A file per rank holds
exactly that rank's model stage and shard, optimizer and schedule.

Under the distributed optimizer each rank keeps its own shard of the Adam state and fp32 master weights, and
:class:`OptimizerShards` saves that shard as it is (the torch optimizer over it, and the shard's values).
megatron-core 0.16.1's own pair for this, ``save_parameter_state``/``load_parameter_state``, cannot resume
without Apex or Transformer Engine, when its optimizer is torch's Adam: its ``load_state_dict`` gives every
parameter one shared ``step`` tensor (which torch's Adam then advances once per parameter and step), and its
loader copies into every key of that state, ``step`` included, from a file that holds only ``param``,
``exp_avg`` and ``exp_avg_sq`` (``KeyError: 'step'`` in ``_set_main_param_and_optimizer_states``).

A save is written to ``step-N.tmp`` and renamed by rank 0 after every rank finished, so a resume only ever
sees whole checkpoints; the same degrees are needed to resume (the files are per rank).

Each file also holds the prepared corpus reader's position (``POSITION``, the training library's
``ReaderPosition``), so that a resume reads the rows an uninterrupted run would have read next; a file
written before it was kept holds none and still loads (``OPTIONAL``).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from trainstack_train.data import Stateful

STEP_DIR = re.compile(r"^step-(\d+)$")
# The data reader's position (trainstack_train.data.ReaderPosition); a checkpoint saved before it was kept
# holds none, and the reader then starts after the samples the saved steps read.
POSITION = "data_position"
OPTIONAL = frozenset({POSITION})


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


def save(root: Path, step: int, states: dict[str, Stateful]) -> Path:
    """Every rank writes its file, then rank 0 publishes the directory; returns the published path."""
    staging, final = root / f"step-{step}.tmp", root / f"step-{step}"
    rank = _rank()
    if rank == 0:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    _barrier()
    body = {name: obj.state_dict() for name, obj in states.items()} | {"step": step}
    torch.save(body, staging / f"rank-{rank:05d}.pt")
    _barrier()
    if rank == 0:
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)
    _barrier()
    return final


def load(root: Path, step: int, states: dict[str, Stateful]) -> int:
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
    missing = sorted(set(states) - set(body) - OPTIONAL)
    if missing:
        raise KeyError(
            f"--checkpoint-dir {root}: {path.name} in {directory.name} holds no {missing} (written with "
            "another --distributed-optimizer setting?)"
        )
    for name, obj in states.items():
        if name in body:
            obj.load_state_dict(body[name])
    return int(body["step"])


def inner_optimizers(optimizer: Any) -> list[torch.optim.Optimizer]:
    """The torch optimizers under megatron-core's (chained) optimizer: under the distributed optimizer, each
    steps this rank's fp32 shards (its param groups' parameters are the shards themselves)."""
    parts = getattr(optimizer, "chained_optimizers", None) or [optimizer]
    return [part.optimizer for part in parts]


class OptimizerShards:
    """This rank's share of the distributed optimizer, saved and loaded as torch's optimizer holds it.

    Per torch optimizer: its ``state_dict`` (Adam's moments and one ``step`` per parameter, the groups'
    hyper-parameters) and the values of the fp32 master shards it steps, which its ``state_dict`` only names
    by index. Loading goes through torch's own ``load_state_dict``, so each parameter gets its own ``step``.
    """

    def __init__(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self.optimizers = optimizers

    @staticmethod
    def _params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
        return [p for group in optimizer.param_groups for p in group["params"]]

    def state_dict(self) -> dict[str, Any]:
        """Moments, steps and master shards of every torch optimizer (the shards' values on the CPU)."""
        return {
            "shards": [
                {"optimizer": opt.state_dict(), "params": [p.detach().cpu() for p in self._params(opt)]}
                for opt in self.optimizers
            ]
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Check every shard's count and shapes first (a mismatch changes nothing), then copy and load."""
        shards = state["shards"]
        if len(shards) != len(self.optimizers):
            raise ValueError(
                f"optimizer checkpoint holds {len(shards)} optimizers, this run has {len(self.optimizers)}"
            )
        for index, (opt, shard) in enumerate(zip(self.optimizers, shards, strict=True)):
            ours = [tuple(p.shape) for p in self._params(opt)]
            saved = [tuple(p.shape) for p in shard["params"]]
            if ours != saved:
                raise ValueError(
                    f"optimizer {index}: the checkpoint's master shards {saved[:3]}... are not this run's "
                    f"{ours[:3]}... (resume needs the degrees that wrote it)"
                )
        with torch.no_grad():
            for opt, shard in zip(self.optimizers, shards, strict=True):
                for param, value in zip(self._params(opt), shard["params"], strict=True):
                    param.copy_(value)
                opt.load_state_dict(shard["optimizer"])
