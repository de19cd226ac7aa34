"""Fixtures of the validation area on the lab: node commands, Slurm presence, nodes put back after a fault."""

from __future__ import annotations

import shutil

import pytest

from tests.support import run


def on_node(node: str, command: str, check: bool = True):
    """Run a shell command as root inside a lab node (the lab's containers are LXC system containers)."""
    return run(["lxc-attach", "-n", node, "--", "sh", "-c", command], check=check, timeout=300)


@pytest.fixture(scope="session")
def lab_slurm(slurm_lab: None) -> None:
    """The lab's Slurm, installed by the collection's playbook (the `slurm_lab` fixture, once a process) and
    answering on the head node: a test that needs it runs wherever it is collected, a slow shard included,
    instead of finding nothing and skipping."""
    if not shutil.which("lxc-attach"):
        pytest.skip("lxc-attach is not installed")
    state = on_node("ts-head", "sinfo -h -N -o '%N %T'", check=False)
    assert state.returncode == 0 and "ts-compute1" in state.stdout, (
        f"the lab's Slurm does not answer (sinfo on ts-head: {state.stdout or state.stderr})"
    )


@pytest.fixture
def resume_nodes():
    """Nodes a test drains; they are returned to service however the test ends."""
    drained: list[str] = []
    yield drained
    for node in drained:
        on_node("ts-head", f"scontrol update NodeName={node} State=RESUME", check=False)
