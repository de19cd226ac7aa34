# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Write a file whole or not at all, with its mode set before anyone can read it.

A reader (sbatch reading a batch script, a registry client reading its credentials, a user reading a run's
attempts) must never see a half-written file, nor a secret file that is briefly world-readable: the text goes
to a temporary file beside the target, gets its mode, and is renamed over the target.
"""

from __future__ import annotations

import os
import tempfile


def write_text_atomic(path: str, text: str, mode: int, dir_mode: int | None = None) -> None:
    """Replace ``path`` with ``text`` (UTF-8) at ``mode``; with ``dir_mode``, make its directory first."""
    directory = os.path.dirname(os.path.abspath(path))
    if dir_mode is not None:
        os.makedirs(directory, mode=dir_mode, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
