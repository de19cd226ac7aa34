"""scripts/run-stages.sh runs make test's stages: in order, `a+b` side by side, and ends with their times.

What make test relies on: a part that fails fails its stage and stops the run (later stages would test on top
of a broken one), every part's log is printed, and in a side-by-side stage only the first part (the long pole)
keeps the normal CPU priority, so that the others take what it leaves instead of lengthening it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support import REPO

SCRIPT = REPO / "scripts" / "run-stages.sh"

# Each target prints its name and the CPU priority it runs at (`nice` with no command prints it).
MAKEFILE = """\
pole:
\t@echo "pole runs at $$(nice)"
side:
\t@echo "side runs at $$(nice)"
broken:
\t@echo "broken says why"; exit 3
after:
\t@echo "after ran"
"""


def _run(tmp_path: Path, *stages: str) -> subprocess.CompletedProcess:
    (tmp_path / "Makefile").write_text(MAKEFILE)
    return subprocess.run(
        ["bash", str(SCRIPT), *stages],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "STAGE_LOGS": str(tmp_path / "logs"), "STAGE_NICE": "7"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _niceness(offset: int = 0) -> int:
    """This process's niceness plus ``offset``, as nice(1) reports it (the tests may themselves run niced)."""
    return min(os.nice(0) + offset, 19)


def _row(output: str, stage: str) -> list[str]:
    """One row of the table the script ends with (stage, result, seconds)."""
    table = output[output.index("STAGE") :].splitlines()
    (row,) = [line.split() for line in table if line.split()[:1] == [stage]]
    return row


def test_side_by_side_parts_after_the_first_run_at_lower_priority(tmp_path: Path) -> None:
    proc = _run(tmp_path, "pole+side", "after")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"pole runs at {_niceness()}" in proc.stdout
    assert f"side runs at {_niceness(7)}" in proc.stdout
    assert _row(proc.stdout, "pole+side")[1] == "ok"
    assert _row(proc.stdout, "after")[1] == "ok"
    assert _row(proc.stdout, "total")[1] == "ok"


def test_a_failing_part_fails_its_stage_prints_its_log_and_stops_the_run(tmp_path: Path) -> None:
    proc = _run(tmp_path, "pole+broken", "after")
    assert proc.returncode != 0
    assert "broken says why" in proc.stdout
    assert f"pole runs at {_niceness()}" in proc.stdout
    assert "after ran" not in proc.stdout
    assert _row(proc.stdout, "pole+broken")[1] == "FAILED"
    assert _row(proc.stdout, "broken")[1] == "FAILED"
    assert _row(proc.stdout, "pole")[1] == "ok"
    assert _row(proc.stdout, "total")[1] == "FAILED"
