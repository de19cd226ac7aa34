"""Checkpoints with orbax: the parameters and the optimizer state, each process writing its own shards.

``--checkpoint-dir DIR`` holds ``step_<8 digits>/`` directories written by orbax's ``CheckpointManager``: it
writes a step under a temporary name and renames it once every process finished, so only complete steps are
listed, and a run restores the highest one and continues from it (the data and the learning rate are
functions of the step, the update count travels in the optimizer state). ``DIR`` must be on a filesystem all
nodes share. Saving is synchronous: the next step starts on a finished checkpoint (the save is excluded from
the step times).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orbax.checkpoint as ocp


class Checkpoints:
    """Orbax's manager under ``directory`` (absolute: orbax refuses relative paths)."""

    def __init__(self, directory: str) -> None:
        options = ocp.CheckpointManagerOptions(
            step_prefix="step", step_format_fixed_length=8, enable_async_checkpointing=False, create=True
        )
        self.manager = ocp.CheckpointManager(Path(directory).resolve(), options=options)

    def latest(self) -> int | None:
        """The highest complete step, or None."""
        return self.manager.latest_step()

    def restore(self, step: int, target: Any) -> Any:
        """The state saved at ``step``, placed like ``target`` (its arrays give shapes, dtypes, shardings)."""
        return self.manager.restore(step, args=ocp.args.StandardRestore(target))

    def save(self, step: int, state: Any) -> None:
        """Every process writes its shards; returns when the step is complete on disk."""
        self.manager.save(step, args=ocp.args.StandardSave(state), force=True)
        self.manager.wait_until_finished()

    def close(self) -> None:
        """Release orbax's threads."""
        self.manager.close()
