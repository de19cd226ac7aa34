"""Distributed checkpoints with torch.distributed.checkpoint (DCP), and auto-resume from the latest one.

Layout: ``<dir>/step-00000010/`` holds DCP's shards and ``.metadata``; ``train_state.json`` (the step and,
for a prepared corpus, the data reader's position) is written by rank 0 only after every rank has finished
``dcp.save``, so its presence marks a complete checkpoint. A run killed
half-way through saving leaves a directory without it, which resume skips. Each rank writes its own shards
(no gather to rank 0), so the directory must be on a filesystem all nodes share.

:class:`Checkpointer` adds asynchronous saving (``dcp.async_save``: the state is copied to host memory, then
written by a background thread while training goes on; the marker follows once every rank's write is done,
at the next save or at the end) and retention (the newest N complete checkpoints, plus every M-th step).
"""

from __future__ import annotations

import json
import re
import shutil
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
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


def write_marker(target: Path, step: int, data: dict[str, Any] | None) -> None:
    """Rank 0, once every rank's shards are written: the step (and data position) that make it complete."""
    marker = {"step": step} if data is None else {"step": step, "data": data}
    (target / MARKER).write_text(json.dumps(marker) + "\n", encoding="utf-8")


def to_remove(root: Path, keep_last: int, keep_every: int) -> list[Path]:
    """The checkpoints retention drops: complete ones beyond the newest ``keep_last`` (0: keep all) whose step
    is not a multiple of ``keep_every`` (0: none kept for that), and partial ones older than the newest
    complete (a save that died; a partial newer than it may be one in progress and is left alone)."""
    if not root.is_dir():
        return []
    steps = sorted((int(m.group(1)), child) for child in root.iterdir() if (m := _STEP_DIR.match(child.name)))
    complete = [(step, path) for step, path in steps if (path / MARKER).is_file()]
    if not complete:
        return []
    newest = complete[-1][0]
    newest_kept = complete[-keep_last:] if keep_last else complete
    kept = {step for step, _path in newest_kept}
    if keep_every:
        kept |= {step for step, _path in complete if step % keep_every == 0}
    dropped = [path for step, path in complete if step not in kept]
    partial = [path for step, path in steps if step < newest and not (path / MARKER).is_file()]
    return sorted(dropped + partial)


@dataclass
class _Pending:
    """An asynchronous save in flight: what its marker will say, and when its write ended on this rank."""

    step: int
    target: Path
    data: dict[str, Any] | None
    future: Future
    started: float
    ended: list[float] = field(default_factory=list)


class Checkpointer:
    """Periodic checkpoints of one run: synchronous or asynchronous, then retention, with the time each cost.

    Why a separate gloo group for asynchronous saves: DCP's write runs collectives (its plan, its metadata)
    from the background thread, which must not interleave with the training step's collectives on the
    default group; the staged state is in host memory, which gloo carries.
    """

    def __init__(
        self,
        root: Path,
        is_main: bool,
        asynchronous: bool,
        keep_last: int,
        keep_every: int,
        write_threads: int = 1,
    ) -> None:
        self.root = root
        self.is_main = is_main
        self.asynchronous = asynchronous
        self.keep = (keep_last, keep_every)
        self.write_threads = write_threads
        self.group = dist.new_group(backend="gloo") if asynchronous else None
        self.pending: _Pending | None = None
        self.blocked_s: list[float] = []
        self.waited_s: list[float] = []
        self.write_s: list[float] = []

    def _writer(self, target: Path) -> dcp.FileSystemWriter:
        """DCP's file writer with ``write_threads`` threads per rank: one stream rarely fills a shared
        filesystem's bandwidth, and the thread count is the knob DCP offers for it."""
        return dcp.FileSystemWriter(str(target), thread_count=self.write_threads)

    def save(
        self, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, data: dict[str, Any] | None
    ) -> None:
        """Collective: checkpoint ``step``; the time the caller is held is recorded in :attr:`blocked_s`.

        The part of it spent finishing the previous asynchronous save is kept apart in :attr:`waited_s`:
        it is what a checkpoint interval shorter than one write costs, not what staging a save costs.
        """
        started = time.perf_counter()
        self.wait()
        self.waited_s.append(time.perf_counter() - started)
        target = step_dir(self.root, step)
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        if self.asynchronous:
            future = dcp.async_save(state, storage_writer=self._writer(target), process_group=self.group)
            pending = _Pending(step, target, data, future, started)
            future.add_done_callback(lambda _done: pending.ended.append(time.perf_counter()))
            self.pending = pending
        else:
            dcp.save(state, storage_writer=self._writer(target))
            self.write_s.append(time.perf_counter() - started)
            self._complete(step, target, data)
        self.blocked_s.append(time.perf_counter() - started)

    def wait(self) -> None:
        """Collective: finish the save in flight, if any (its marker, then retention)."""
        if self.pending is None:
            return
        pending, self.pending = self.pending, None
        pending.future.result()
        self.write_s.append((pending.ended[0] if pending.ended else time.perf_counter()) - pending.started)
        self._complete(pending.step, pending.target, pending.data)

    def close(self) -> None:
        """Collective, at the end of the run: the last save completes before the summary says it exists."""
        started = time.perf_counter()
        had = self.pending is not None
        self.wait()
        if had:
            self.blocked_s.append(time.perf_counter() - started)

    def _complete(self, step: int, target: Path, data: dict[str, Any] | None) -> None:
        dist.barrier()
        if self.is_main:
            write_marker(target, step, data)
            for path in to_remove(self.root, *self.keep):
                shutil.rmtree(path, ignore_errors=True)
        dist.barrier()

    def summary(self) -> dict[str, Any]:
        """What the checkpoints cost: the training time lost to them and how long their writes took."""
        return {
            "saved": len(self.write_s),
            "asynchronous": self.asynchronous,
            "blocked_s": round(sum(self.blocked_s), 4),
            "blocked_each_s": [round(value, 4) for value in self.blocked_s],
            "waited_s": [round(value, 4) for value in self.waited_s],
            "write_s": [round(value, 4) for value in self.write_s],
            "write_threads": self.write_threads,
            "keep_last": self.keep[0],
            "keep_every": self.keep[1],
        }


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
        write_marker(target, step, data)
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
