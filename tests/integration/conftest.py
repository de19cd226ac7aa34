"""Integration fixtures: the lab is brought up once per session; its teardown test runs last."""

from __future__ import annotations

import pytest

from tests.support import playbook


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked lab_teardown take the lab down, so they run after every other test."""
    items.sort(key=lambda item: item.get_closest_marker("lab_teardown") is not None)


@pytest.fixture(scope="session")
def lab(lab_required: None) -> None:
    """A running 3-node lab (head + 2 compute); lab-up is idempotent, so a lab already up is reused."""
    playbook("lab_up", "-e", "lab_node_count=3")


@pytest.fixture(scope="session")
def slurm_lab(lab: None) -> None:
    """The lab with Slurm and accounting, installed by the collection's playbook (idempotent, so reused)."""
    playbook("slurm_cluster", "-i", "inventories/local")
