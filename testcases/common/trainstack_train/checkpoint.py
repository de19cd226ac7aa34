"""Distributed checkpoints with torch.distributed.checkpoint (DCP), and auto-resume from the latest one.

Layout: ``<dir>/step-00000010/`` holds DCP's shards and ``.metadata``; ``train_state.json`` (the step and,
for a prepared corpus, the data reader's position) is written by rank 0 only after every rank has finished
``dcp.save``, so its presence marks a complete checkpoint. A run killed
half-way through saving leaves a directory without it, which resume skips. Each rank writes its own shards
(no gather to rank 0), so the directory must be on a filesystem all nodes share.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

MARKER = "train_state.json"
_STEP_DIR = re.compile(r"^step-(\d{8})$")


def step_dir(root: Path, step: int) -> Path:
    """Zero-padded so lexical and numeric order agree."""
    return root / f"step-{step:08d}"


def latest_complete(root: Path) -> tuple[int, Path] | None:
    """Highest step whose marker exists, or ``None`` for a fresh start."""
    if not root.is_dir():
        return None
    found: list[tuple[int, Path]] = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and (child / MARKER).is_file():
            found.append((int(match.group(1)), child))
    return max(found) if found else None


def save(
    root: Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    is_main: bool,
    data: dict[str, Any] | None = None,
) -> Path:
    """Collective: every rank writes its shards of model and optimizer state, then rank 0 marks it done.

    ``data`` is the data reader's position (the same on every rank), kept in the marker beside the step.
    """
    target = step_dir(root, step)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(target))
    dist.barrier()
    if is_main:
        marker = {"step": step} if data is None else {"step": step, "data": data}
        (target / MARKER).write_text(json.dumps(marker) + "\n", encoding="utf-8")
    dist.barrier()
    return target


def load(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Collective: read shards in place into the (already sharded) model and optimizer; returns the step."""
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return int(json.loads((path / MARKER).read_text(encoding="utf-8"))["step"])


def data_state(path: Path) -> dict[str, Any] | None:
    """The data position saved with a complete checkpoint; ``None`` when it was saved without one."""
    marker = json.loads((path / MARKER).read_text(encoding="utf-8"))
    state = marker.get("data")
    return state if isinstance(state, dict) else None
