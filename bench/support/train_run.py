"""One run of a test case's entry point as a benchmark child: its summary JSON, or why there is none.

Why here: the GPU benchmarks that compare runs of ``testcases/pytorch/fsdp`` (FP8 parity, data and
checkpoints) start it the same way and record the same failure shape, so a failed child reads alike in
every results file.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def run_summary(
    cmd: Sequence[str],
    summary: Path,
    log: Path,
    timeout: int,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``cmd`` (which writes ``summary``), keep its output in ``log``; the summary with ``ok`` and the
    wall time, or ``ok: False`` with the return code and the output's tail."""
    started = time.perf_counter()
    proc = subprocess.run(
        list(cmd),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=None if env is None else dict(env),
    )
    log.write_text(proc.stdout + proc.stderr, encoding="utf-8")
    wall = time.perf_counter() - started
    if proc.returncode or not summary.exists():
        return {
            "ok": False,
            "returncode": proc.returncode,
            "error": (proc.stdout + proc.stderr)[-800:],
            "wall_s": wall,
        }
    return {"ok": True, "wall_s": wall, **json.loads(summary.read_text(encoding="utf-8"))}
