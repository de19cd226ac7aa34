"""A compute node lost mid-life: Slurm marks it down, keeps a 2-node job pending, and runs it on return."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.support import on_lab_node, wait_for

pytestmark = pytest.mark.lab


def on_head(command: str) -> str:
    return on_lab_node(command)


def node_state(node: str) -> str:
    return on_head(f"sinfo --noheader --Node --nodes={node} --format=%T")


def test_lost_node_goes_down_and_the_job_waits_for_it(slurm_lab: None) -> None:
    wait_for(lambda: node_state("ts-compute2") == "idle", 60, "ts-compute2 idle")
    subprocess.run(["lxc-stop", "-k", "-n", "ts-compute2"], check=True)
    try:
        wait_for(
            lambda: node_state("ts-compute2").startswith(("down", "idle*")), 90, "ts-compute2 to go down"
        )
        job = on_head("sbatch --parsable --nodes=2 --wrap 'srun hostname'")
        time.sleep(3)
        assert on_head(f"squeue --noheader --job {job} --format=%T") == "PENDING"
        wait_for(lambda: node_state("ts-compute2").startswith("down"), 90, "ts-compute2 down")
        assert on_head(f"squeue --noheader --job {job} --format=%T") == "PENDING"
    finally:
        subprocess.run(["lxc-start", "-n", "ts-compute2", "-d"], check=True)
    wait_for(lambda: node_state("ts-compute2") in ("idle", "allocated", "mixed"), 120, "ts-compute2 back")
    wait_for(lambda: on_head(f"squeue --noheader --job {job} --format=%T") == "", 120, f"job {job} to finish")
    accounted = on_head(f"sacct --noheader --parsable2 -X -j {job} --format=State,NNodes")
    assert accounted == "COMPLETED|2"
