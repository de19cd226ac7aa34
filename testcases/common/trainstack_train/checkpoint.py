"""Distributed checkpoints with torch.distributed.checkpoint (DCP), and auto-resume from the latest one.

Layout: ``<dir>/step-00000010/`` holds DCP's shards and ``.metadata``; ``train_state.json`` (the step, the
model's shape and, for a prepared corpus, the data reader's position) is written by rank 0 only after every
rank has finished ``dcp.save``, so its presence marks a complete checkpoint. A run killed half-way through
saving leaves an entry without it, which resume skips and names. Each rank writes its own shards (no gather
to rank 0), so ``<dir>`` is a filesystem all nodes share or an S3 prefix (:mod:`.storage`: the same rules on
both).

:class:`Checkpointer` adds asynchronous saving (``dcp.async_save``: the state is copied to host memory, then
written by a background thread while training goes on; the marker follows once every rank's write is done,
at the next save or at the end) and retention (the newest N complete checkpoints, plus every M-th step).
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from .config import ModelConfig
from .storage import CheckpointStore

MARKER = "train_state.json"
_STEP_DIR = re.compile(r"^step-(\d{8})$")


def step_name(step: int) -> str:
    """Zero-padded so lexical and numeric order agree."""
    return f"step-{step:08d}"


def _steps(store: CheckpointStore) -> list[tuple[int, str, bool]]:
    """Every checkpoint entry, oldest first: its step, its name, whether its marker exists."""
    found = [(int(m.group(1)), name) for name in store.names() if (m := _STEP_DIR.match(name))]
    return [(step, name, store.has(name, MARKER)) for step, name in sorted(found)]


def latest_complete(store: CheckpointStore) -> tuple[int, str] | None:
    """Highest step whose marker exists, or ``None`` for a fresh start."""
    complete = [(step, name) for step, name, done in _steps(store) if done]
    return complete[-1] if complete else None


def shape_record(model: ModelConfig) -> dict[str, Any]:
    """The model's shape as the marker keeps it (JSON's types, so a read-back compares equal)."""
    return json.loads(json.dumps(dataclasses.asdict(model)))


def write_marker(
    store: CheckpointStore,
    name: str,
    step: int,
    data: dict[str, Any] | None,
    model: dict[str, Any] | None = None,
) -> None:
    """Rank 0, once every rank's shards are written: the step (and data position, and the model's shape)
    that make it complete."""
    marker: dict[str, Any] = {"step": step}
    if data is not None:
        marker["data"] = data
    if model is not None:
        marker["model"] = model
    store.write_text(name, MARKER, json.dumps(marker) + "\n")


@dataclass(frozen=True)
class ResumePoint:
    """Where a run continues: the newest complete checkpoint (``name`` None: a fresh start), its marker,
    and the partial checkpoints newer than it that were passed over (their locations, for the log)."""

    step: int
    name: str | None
    marker: dict[str, Any]
    skipped: list[str]


def resume_point(store: CheckpointStore, model: ModelConfig) -> ResumePoint:
    """The checkpoint to resume from, refused (``ValueError`` naming it) when another shape saved it.

    Why before the model is built: DCP would only fail inside ``load`` with a tensor size mismatch that names
    neither the directory nor the option; the marker's shape says it first. Markers from before the shape was
    recorded are taken as they are.
    """
    steps = _steps(store)
    complete = [(step, name) for step, name, done in steps if done]
    step, name = complete[-1] if complete else (0, None)
    skipped = [store.where(other) for other_step, other, done in steps if not done and other_step > step]
    if name is None:
        return ResumePoint(0, None, {}, skipped)
    marker = json.loads(store.read_text(name, MARKER))
    saved = marker.get("model")
    current = shape_record(model)
    if isinstance(saved, dict) and saved != current:
        differs = sorted(key for key in saved.keys() | current.keys() if saved.get(key) != current.get(key))
        detail = ", ".join(f"{key} {saved.get(key)!r} there, {current.get(key)!r} here" for key in differs)
        raise ValueError(
            f"--checkpoint-dir {store.location}: {store.where(name)} was saved by another model shape "
            f"({detail}): resume it with the --config it was saved with, or start a new --checkpoint-dir"
        )
    return ResumePoint(int(marker["step"]), name, marker, skipped)


def to_remove(store: CheckpointStore, keep_last: int, keep_every: int) -> list[str]:
    """The checkpoints retention drops: complete ones beyond the newest ``keep_last`` (0: keep all) whose step
    is not a multiple of ``keep_every`` (0: none kept for that), and partial ones older than the newest
    complete (a save that died; a partial newer than it may be one in progress and is left alone)."""
    steps = _steps(store)
    complete = [(step, name) for step, name, done in steps if done]
    if not complete:
        return []
    newest = complete[-1][0]
    newest_kept = complete[-keep_last:] if keep_last else complete
    kept = {step for step, _name in newest_kept}
    if keep_every:
        kept |= {step for step, _name in complete if step % keep_every == 0}
    dropped = [name for step, name in complete if step not in kept]
    partial = [name for step, name, done in steps if step < newest and not done]
    return sorted(dropped + partial)


@dataclass
class _Pending:
    """An asynchronous save in flight: what its marker will say, and when its write ended on this rank."""

    step: int
    name: str
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
        store: CheckpointStore | None,
        is_main: bool,
        asynchronous: bool,
        keep: tuple[int, int],
        shape: dict[str, Any] | None = None,
        write_threads: int = 1,
        pinned: bool = False,
    ) -> None:
        """``store`` None: a run without checkpoints (only :meth:`summary` and :meth:`close` are called);
        ``keep`` is (keep-last, keep-every); ``shape`` goes into every marker (see :func:`resume_point`);
        ``pinned``: asynchronous saves stage into one pinned buffer kept for the run (see :meth:`_writer`)."""
        self.store = store
        self.is_main = is_main
        self.asynchronous = asynchronous
        self.keep = keep
        self.shape = shape
        self.write_threads = write_threads
        self.pinned = pinned
        self.kept_writer: Any = None
        self.group = dist.new_group(backend="gloo") if asynchronous else None
        self.pending: _Pending | None = None
        self.blocked_s: list[float] = []
        self.waited_s: list[float] = []
        self.write_s: list[float] = []

    def save(
        self, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, data: dict[str, Any] | None
    ) -> None:
        """Collective: checkpoint ``step``; the time the caller is held is recorded in :attr:`blocked_s`.

        The part of it spent finishing the previous asynchronous save is kept apart in :attr:`waited_s`:
        it is what a checkpoint interval shorter than one write costs, not what staging a save costs.
        """
        if self.store is None:
            raise ValueError("a checkpoint needs --checkpoint-dir")
        started = time.perf_counter()
        self.wait()
        self.waited_s.append(time.perf_counter() - started)
        name = step_name(step)
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        if self.asynchronous:
            future = dcp.async_save(
                state,
                checkpoint_id=self.store.where(name) if self.pinned else None,
                storage_writer=self._writer(name),
                process_group=self.group,
            )
            pending = _Pending(step, name, data, future, started)
            future.add_done_callback(lambda _done: pending.ended.append(time.perf_counter()))
            self.pending = pending
        else:
            dcp.save(state, storage_writer=self.store.writer(name, self.write_threads))
            self.write_s.append(time.perf_counter() - started)
            self._complete(step, name, data)
        self.blocked_s.append(time.perf_counter() - started)

    def _writer(self, name: str) -> Any:
        """The writer of an asynchronous save: a new one each save, or with ``pinned`` one for the run.

        Why one for the run: DCP's writer with ``cache_staged_state_dict`` stages into a pinned host buffer
        that it allocates at its first save and reuses; a new writer per save would allocate (and pin) the
        whole state again. ``async_save``'s ``checkpoint_id`` points the kept writer at each save's
        directory. The buffer is overwritten only by the next save, which first waits for this one.
        """
        if not self.pinned:
            return self.store.writer(name, self.write_threads)
        if self.kept_writer is None:
            self.kept_writer = self.store.writer(name, self.write_threads, cache_staging=True)
        return self.kept_writer

    def wait(self) -> None:
        """Collective: finish the save in flight, if any (its marker, then retention)."""
        if self.pending is None:
            return
        pending, self.pending = self.pending, None
        pending.future.result()
        self.write_s.append((pending.ended[0] if pending.ended else time.perf_counter()) - pending.started)
        self._complete(pending.step, pending.name, pending.data)

    def close(self) -> None:
        """Collective, at the end of the run: the last save completes before the summary says it exists."""
        started = time.perf_counter()
        had = self.pending is not None
        self.wait()
        if had:
            self.blocked_s.append(time.perf_counter() - started)

    def _complete(self, step: int, name: str, data: dict[str, Any] | None) -> None:
        assert self.store is not None  # save() refused a run without one
        dist.barrier()
        if self.is_main:
            write_marker(self.store, name, step, data, self.shape)
            for old in to_remove(self.store, *self.keep):
                self.store.remove(old, MARKER)
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
            "staging": "pinned" if self.pinned else "pageable",
            "keep_last": self.keep[0],
            "keep_every": self.keep[1],
        }


def load(
    store: CheckpointStore, point: ResumePoint, model: nn.Module, optimizer: torch.optim.Optimizer
) -> int:
    """Collective: read shards in place into the (already sharded) model and optimizer; returns the step."""
    if point.name is None:
        return 0
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, storage_reader=store.reader(point.name))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return point.step


def data_state(point: ResumePoint) -> dict[str, Any] | None:
    """The data position saved with a complete checkpoint; ``None`` when it was saved without one."""
    state = point.marker.get("data")
    return state if isinstance(state, dict) else None


def announce_skipped(point: ResumePoint, say: Callable[[str], None] = print) -> None:
    """Name every partial checkpoint resume passed over (a save killed before its marker)."""
    for where in point.skipped:
        say(f"checkpoint: skipping {where}: no {MARKER}, its save did not complete")
