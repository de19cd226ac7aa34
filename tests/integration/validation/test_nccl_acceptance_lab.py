"""nccl_acceptance on the lab's Slurm: the nccl/collectives test case (gloo on CPU, one task per node) across
both compute nodes through srun, against the lab's floor; then against an unreachable floor, where the play
must fail and say that two nodes cannot be told apart by pairs. Slow: it stages a CPU torch venv (about 2 min
on first use) on the lab's shared directory from the host's local wheel (/opt/wheels)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support import playbook

pytestmark = [pytest.mark.lab, pytest.mark.slow]
HOST_SHARED = Path("/var/lib/trainstack/lab/shared")
VENV = "trainstack/venvs/torch-cpu"


@pytest.fixture(scope="module")
def torch_venv(lab_slurm) -> str:
    """A venv of Debian's python3 (the nodes run the same one) with torch, on the shared directory."""
    python = HOST_SHARED / VENV / "bin/python"
    probe = [str(python), "-c", "import torch"]
    usable = python.exists() and subprocess.run(probe, check=False).returncode == 0
    if not usable:
        subprocess.run(["/usr/bin/python3", "-m", "venv", str(HOST_SHARED / VENV)], check=True)
        subprocess.run([str(HOST_SHARED / VENV / "bin/pip"), "install", "-q", "torch==2.13.0"], check=True)
    return f"/shared/{VENV}/bin/python"


def accept(tmp_path, python, *args):
    return playbook(
        "nccl_acceptance",
        "-i",
        "inventories/local",
        "-e",
        f"nccl_acceptance_python={python}",
        "-e",
        "nccl_acceptance_max_bytes=4M",
        "-e",
        f"nccl_acceptance_results_dir={tmp_path}",
        *args,
        check=False,
    )


def test_lab_is_accepted(torch_venv, tmp_path):
    done = accept(tmp_path, torch_venv)
    assert done.returncode == 0, done.stdout[-3000:]
    (result_file,) = tmp_path.glob("*.json")
    result = json.loads(result_file.read_text())
    assert result["passed"] and result["nodes"] == ["ts-compute1", "ts-compute2"]
    assert result["all_nodes_gbps"] >= result["threshold_gbps"] == 0.01
    assert [m["nodes"] for m in result["measurements"]] == [["ts-compute1", "ts-compute2"]]


def test_below_the_floor_fails_and_says_why(torch_venv, tmp_path):
    done = accept(tmp_path, torch_venv, "-e", "nccl_acceptance_threshold_gbps=100000")
    out = " ".join(done.stdout.split())
    assert done.returncode != 0
    assert "is below 100000 GB/s" in out and "Slow nodes: none found by pairs" in out
    assert "every pair is below the floor" in out
