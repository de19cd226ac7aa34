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


def results_dir(output: str) -> Path:
    match = re.search(r"^\s*- results\s+(/\S+)", output, re.M)
    assert match, output[-3000:]
    return Path(match.group(1))


def nothing_submitted(name: str) -> bool:
    return on_lab_node(f"sacct --noheader -X --name {name} --starttime now-1hour --format=JobID") == ""


@pytest.fixture(scope="module")
def lab_ready(slurm_lab: None) -> None:
    subprocess.run(["make", "wheelhouse"], check=True, capture_output=True)
