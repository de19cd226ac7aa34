"""Launch test helpers: launch_training against the lab's inventory, and where its results land."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support import on_lab_node, playbook

SHARED = Path("/var/lib/trainstack/lab/shared")  # the lab's shared directory, as the host sees it


def launch(*extra: str, check: bool = True) -> subprocess.CompletedProcess:
    return playbook("launch_training", "-i", "inventories/local", *extra, check=check, timeout=1200)


def on_both_nodes(testcase: str, name: str, *extra: str) -> list[str]:
    """launch_training arguments: a test case on the lab's two compute nodes, results on the shared dir."""
    return [
        "-e",
        f"training_job_testcase={testcase}",
        "-e",
        "training_job_nodes=2",
        "-e",
        f"training_job_name={name}",
        "-e",
        f"training_job_results_dir={SHARED.parent}/results",
        *extra,
    ]


def fsdp_on_both_nodes(name: str, *extra: str) -> list[str]:
    """pytorch/fsdp on both compute nodes."""
    return on_both_nodes("pytorch/fsdp", name, *extra)


def slow_case_on_both_nodes(testcase: str, name: str, wheelhouse: Path, *extra: str) -> list[str]:
    """A test case of the slow wheelhouse on both compute nodes, its virtualenv built from ``wheelhouse``."""
    return on_both_nodes(testcase, name, "-e", f"training_job_wheelhouse={wheelhouse}", *extra)


def results_dir(output: str) -> Path:
    match = re.search(r"^\s*- results\s+(/\S+)", output, re.M)
    assert match, output[-3000:]
    return Path(match.group(1))


def nothing_submitted(name: str) -> bool:
    return on_lab_node(f"sacct --noheader -X --name {name} --starttime now-1hour --format=JobID") == ""


@pytest.fixture(scope="module")
def lab_ready(slurm_lab: None) -> None:
    subprocess.run(["make", "wheelhouse"], check=True, capture_output=True)
