"""Fixtures of the validation area on the lab: node commands, Slurm presence, nodes put back after a fault."""

from __future__ import annotations

import shutil

import pytest

from tests.support import run


def on_node(node: str, command: str, check: bool = True):
    """Run a shell command as root inside a lab node (the lab's containers are LXC system containers)."""
    return run(["lxc-attach", "-n", node, "--", "sh", "-c", command], check=check, timeout=300)


@pytest.fixture(scope="session")
def lab_slurm(lab: None) -> None:
    """The lab's Slurm (roles/slurm, installed by the Slurm scenario or make demo); skipped where absent."""
    if not shutil.which("lxc-attach"):
        pytest.skip("lxc-attach is not installed")
    state = on_node("ts-head", "sinfo -h -N -o '%N %T'", check=False)
    if state.returncode != 0 or "ts-compute1" not in state.stdout:
        pytest.skip(f"no Slurm cluster in the lab yet (sinfo on ts-head: {state.stdout or state.stderr})")


@pytest.fixture
def resume_nodes():
    """Nodes a test drains; they are returned to service however the test ends."""
    drained: list[str] = []
    yield drained
    for node in drained:
        on_node("ts-head", f"scontrol update NodeName={node} State=RESUME", check=False)
