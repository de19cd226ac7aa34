"""launch_training --check on the lab: a valid request passes every check (Slurm partition included) and
changes nothing: no job, no run directory, no results; a bad one still fails naming its rule."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import SHARED, fsdp_on_both_nodes, launch, nothing_submitted

pytestmark = pytest.mark.lab


def runs() -> set[str]:
    root = SHARED / "trainstack" / "runs"
    return {p.name for p in root.iterdir()} if root.is_dir() else set()


def test_check_mode_on_a_valid_request_changes_nothing(lab_ready: None, tmp_path: Path) -> None:
    name = f"it-check-{os.getpid()}"
    before = runs()
    proc = launch(*fsdp_on_both_nodes(name), "-e", f"training_job_results_dir={tmp_path}/results", "--check")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "ok: [ts-head]" in proc.stdout
    assert "Check mode: pytorch/fsdp passed every check" in proc.stdout
    assert runs() == before
    assert not (tmp_path / "results").exists()
    assert nothing_submitted(name)


def test_check_mode_still_refuses_a_bad_request(lab_ready: None) -> None:
    name = f"it-check-bad-{os.getpid()}"
    proc = launch(*fsdp_on_both_nodes(name), "-e", "training_job_nodes=5", "--check", check=False)
    assert proc.returncode != 0
    assert "5 nodes requested but partition 'default' has 2" in proc.stdout + proc.stderr
    assert nothing_submitted(name)
