"""Slurm on the 3-node lab, installed once per session by the collection's own playbook."""

from __future__ import annotations

import pytest

from tests.support import playbook


@pytest.fixture(scope="session")
def slurm_lab(lab: None) -> None:
    """The lab with Slurm, accounting included (idempotent: a lab that already runs Slurm is reused)."""
    playbook("slurm_cluster", "-i", "inventories/local")
