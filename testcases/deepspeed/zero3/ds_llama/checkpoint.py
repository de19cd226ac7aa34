"""DeepSpeed's checkpoints under ``--checkpoint-dir``, published once every rank wrote.

``engine.save_checkpoint`` writes each rank's files into ``DIR/step-<8 digits>/`` (the model states, each
rank's ZeRO partition of the optimizer, the scheduler; in the client state our step and the data reader's
position in a prepared corpus, :class:`~trainstack_train.data.ReaderPosition`'s); DeepSpeed's own
``latest`` file is written by rank 0 as soon as rank 0 has saved, before the other ranks may have. So the
case saves with ``save_latest=False`` and rank 0 writes ``latest`` itself, atomically, after
``save_checkpoint``'s closing barrier: a run killed mid-save leaves ``latest`` on the previous complete step.
``engine.load_checkpoint(DIR)`` reads the tag from ``latest``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainstack_train.data import Stateful

LATEST = "latest"
# The client-state key of the reader's position (absent from checkpoints saved before it was kept).
POSITION = "data_position"


def tag(step: int) -> str:
    """The directory name of the checkpoint after ``step`` steps."""
    return f"step-{step:08d}"


def latest_tag(root: Path) -> str | None:
    """The published tag, or None (a fresh start) when nothing was published yet."""
    marker = root / LATEST
    if not marker.is_file():
        return None
    text = marker.read_text(encoding="utf-8").strip()
    return text if (root / text).is_dir() else None


def publish(root: Path, name: str) -> None:
    """Point ``latest`` at ``name`` (temporary file, then rename: never half written)."""
    tmp = root / f".{LATEST}.tmp"
    tmp.write_text(name, encoding="utf-8")
    tmp.replace(root / LATEST)


def client_state(step: int, position: Stateful) -> dict[str, Any]:
    """What the case adds to DeepSpeed's checkpoint: the step and the reader's position."""
    return {"step": step, POSITION: position.state_dict()}


def restore(saved: dict[str, Any], position: Stateful) -> int:
    """The step of a loaded client state; its reader position, if it holds one, into ``position``."""
    if POSITION in saved:
        position.load_state_dict(saved[POSITION])
    return int(saved["step"])


def save(engine: Any, root: Path, step: int, is_main: bool, position: Stateful) -> None:
    """Every rank's share, then the tag published by rank 0 (after the barrier inside ``save_checkpoint``)."""
    name = tag(step)
    engine.save_checkpoint(str(root), tag=name, client_state=client_state(step, position), save_latest=False)
    if is_main:
        publish(root, name)
    import deepspeed.comm as ds_comm

    ds_comm.barrier()


def resume(engine: Any, root: Path, position: Stateful) -> int:
    """Load the published checkpoint into the engine (model, optimizer partitions, schedule) and the reader's
    position into ``position``; its step."""
    name = latest_tag(root)
    if name is None:
        return 0
    path, saved = engine.load_checkpoint(str(root), tag=name)
    if path is None:
        raise RuntimeError(f"DeepSpeed could not load the checkpoint {root / name}")
    return restore(saved, position)
