"""Which checkpoint a relaunch resumes, and which of the case's optional states it lacks.

Why: torchtitan's ``CheckpointManager`` loads every state it was given, and ``torch.distributed.checkpoint``
refuses a state the checkpoint does not hold (``Missing key in checkpoint state_dict:
data_position.position``). A checkpoint saved before the data reader's position was kept holds no
``data_position``; rather than refuse it, the loop asks torchtitan not to load that state (its
``checkpoint.exclude_from_loading``), and the reader then starts after the samples the saved steps read, as
``megatron/gpt`` and ``deepspeed/zero3`` do. What a checkpoint holds is read from DCP's metadata (one small
file), before anything is loaded. torch only, no torchtitan: the CPU tests read it without the case's
dependencies.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from torch.distributed.checkpoint import FileSystemReader

# The state of the data reader's position (trainstack_train.data.ReaderPosition) among torchtitan's states.
POSITION = "data_position"
# States a checkpoint may lack: saved before the case kept them.
OPTIONAL = (POSITION,)
# torchtitan's layout: <folder>/step-N, complete once DCP's .metadata is written (its _find_load_step).
STEP_DIR = re.compile(r"^step-(\d+)$")
METADATA = ".metadata"


def latest(folder: str) -> tuple[int, Path] | None:
    """The highest complete ``step-N`` under ``folder`` and its path, as torchtitan picks the one to resume;
    None for a fresh start (no folder, or no complete checkpoint in it)."""
    root = Path(folder)
    if not folder or not root.is_dir():
        return None
    steps = [
        int(match.group(1))
        for path in root.iterdir()
        if (match := STEP_DIR.match(path.name)) and (path / METADATA).is_file()
    ]
    if not steps:
        return None
    step = max(steps)
    return step, root / f"step-{step}"


def saved_states(checkpoint: Path) -> set[str]:
    """The top-level states a DCP checkpoint holds (``data_position.position`` is ``data_position``'s)."""
    metadata = FileSystemReader(str(checkpoint)).read_metadata()
    return {key.split(".", 1)[0] for key in metadata.state_dict_metadata}


def absent(checkpoint: Path, optional: Iterable[str] = OPTIONAL) -> list[str]:
    """The optional states ``checkpoint`` does not hold, for torchtitan's ``exclude_from_loading``."""
    held = saved_states(checkpoint)
    return [name for name in optional if name not in held]


def derived_position_note(checkpoint: Path, step: int) -> str:
    """The line a resume prints when the checkpoint holds no reader position."""
    return (
        f"torchtitan/llama: {checkpoint} holds no {POSITION} (saved before the data reader's position was "
        f"kept): the reader's position is derived from step {step}, after the samples {step} steps read"
    )
