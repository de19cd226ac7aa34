"""nccl_acceptance on the lab's Slurm with benchmark output the play must not take for a slow fabric: a
command that prints no table, and a table whose rows report wrong elements (an nccl-tests fixture printed by
rank 0 through the real srun --label path). Fast: no torch, each job only prints."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support import playbook

pytestmark = [pytest.mark.lab]
HOST_SHARED = Path("/var/lib/trainstack/lab/shared")
FIXTURES = Path(__file__).resolve().parents[2] / "unit/validation/fixtures"


def accept(tmp_path: Path, command: str):
    """The play with its measurement command replaced; the result record lands in tmp_path."""
    done = playbook(
        "nccl_acceptance",
        "-i",
        "inventories/local",
        "-e",
        json.dumps({"nccl_acceptance_command": command}),
        "-e",
        f"nccl_acceptance_results_dir={tmp_path}",
        check=False,
    )
    (result_file,) = tmp_path.glob("*.json")
    return done, " ".join(done.stdout.split()), json.loads(result_file.read_text(encoding="utf-8"))


def test_output_without_a_table_fails_and_blames_no_node(lab_slurm, tmp_path):
    done, out, result = accept(tmp_path, "echo all_reduce_perf: command not found")
    assert done.returncode != 0
    assert "cannot be judged (unparsable), so no node is blamed" in out and "no result rows" in out
    assert result["verdict"] == "unparsable" and result["slow"] == [] and len(result["measurements"]) == 1
    assert result["measurements"][0]["output"]["prefix"] == "srun-label"


def test_wrong_elements_fail_the_play(lab_slurm, tmp_path):
    staged = HOST_SHARED / "trainstack/nccl_acceptance_fixtures"
    staged.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / "nccl-tests-all_reduce.wrong.txt", staged / "wrong.txt")
    command = "if [ $SLURM_PROCID = 0 ]; then cat /shared/trainstack/nccl_acceptance_fixtures/wrong.txt; fi"
    done, out, result = accept(tmp_path, command)
    assert done.returncode != 0
    assert "all_reduce returned wrong elements across 2 nodes" in out and "1048580 wrong elements" in out
    assert result["verdict"] == "wrong_results" and result["slow"] == []
    output = result["measurements"][0]["output"]
    assert (output["prefix"], output["rank"], output["out_of_bounds"]) == ("srun-label", 0, 1)
