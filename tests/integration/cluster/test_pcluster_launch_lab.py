"""Inventory and launch meet on the lab: a ParallelCluster fleet in moto whose nodes carry the lab's addresses
(head node and compute nodes as lab-up made them, read from inventories/local/hosts.yml), found by the
ec2_cluster plugin through its endpoint option and reached as inventories/local reaches the lab (same user,
key and settings, through compose). launch_training -e cluster=<name>, with no launch_host, runs pytorch/ddp
on the lab's head node through Slurm. A name that matches no cluster, and two clusters without a name, fail
with the filter's message and submit nothing. One real launch (the lightest case, one node).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.support.moto_fleet import plain
from tests.integration.launch.conftest import lab_ready, nothing_submitted, results_dir
from tests.support import REPO, VENV_BIN, on_lab_node, playbook, run, start_moto

from .pcluster_fleet import (
    Cluster,
    inventory_env,
    lab_addresses,
    lab_hostvars,
    launch_clusters,
    write_inventory,
)

# A real training launch on the lab's Slurm, found through moto: make test-slow runs it.
pytestmark = [pytest.mark.lab, pytest.mark.moto, pytest.mark.cluster, pytest.mark.slow]
__all__ = ["lab_ready"]  # the launch tests' fixture: the lab with Slurm, and the wheelhouse built

LAUNCH_PLAY = "PLAY [Launch a training test case]"


@dataclass
class LabFleet:
    inventory: Path
    head_address: str
    head_host: str


@pytest.fixture(scope="module")
def lab_fleet(lab_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabFleet]:
    """Cluster `lab` on the lab's own addresses, and cluster `other` (never reached) beside it."""
    head, computes = lab_addresses(REPO)
    server = start_moto()
    try:
        launch_clusters(
            server,
            [
                Cluster("lab", head, {"compute": computes}),
                Cluster("other", "10.77.0.200", {"gpu": ["10.77.0.201"]}),
            ],
        )
        inventory = write_inventory(tmp_path_factory.mktemp("inventory"), server.url, lab_hostvars(REPO))
        listing = run(
            [str(VENV_BIN / "ansible-inventory"), "-i", str(inventory), "--list"],
            env=inventory_env(),
            timeout=180,
        )
        found = plain(json.loads(listing.stdout))
        (head_host,) = found["cluster_lab_head"]["hosts"]
        assert found["_meta"]["hostvars"][head_host]["ansible_host"] == head
        yield LabFleet(inventory, head, head_host)
    finally:
        server.stop()


def launch(fleet: LabFleet, name: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return playbook(
        "launch_training",
        "-i",
        str(fleet.inventory),
        "-e",
        "training_job_testcase=pytorch/ddp",
        "-e",
        "training_job_nodes=1",
        "-e",
        f"training_job_name={name}",
        "-e",
        f"training_job_results_dir={tmp_path / 'results'}",
        *extra,
        check=False,
        env=inventory_env(),
        timeout=1200,
    )


def test_launch_by_cluster_name_runs_on_the_lab_head_through_slurm(
    lab_fleet: LabFleet, tmp_path: Path
) -> None:
    name = f"it-pcluster-{os.getpid()}"
    proc = launch(lab_fleet, name, tmp_path, "-e", "cluster=lab")
    assert proc.returncode == 0, proc.stdout[-4000:]
    launched = proc.stdout.split(LAUNCH_PLAY, 1)[1]
    assert f"ok: [{lab_fleet.head_host}]" in launched
    summary = json.loads((results_dir(proc.stdout) / "summary.json").read_text())
    assert summary["world_size"] == 1 and summary["final_loss"] < summary["first_loss"]
    # Slurm on the lab's head node has the job, finished.
    states = on_lab_node(
        f"sacct --noheader -X --parsable2 --name {name} --starttime now-1hour --format=State",
        lab_fleet.head_address,
    )
    assert states.split() == ["COMPLETED"], states


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-e", "cluster=no-such"], "cluster=no-such: no group cluster_no_such_head in the inventory"),
        ([], "has 2 head hosts"),
    ],
    ids=["unknown-name", "two-clusters-no-name"],
)
def test_no_single_head_submits_nothing(
    lab_fleet: LabFleet, tmp_path: Path, extra: list[str], message: str
) -> None:
    name = f"it-pcluster-none-{os.getpid()}"
    proc = launch(lab_fleet, name, tmp_path, *extra)
    assert proc.returncode != 0
    text = " ".join((proc.stdout + proc.stderr).split())
    assert message in text and "(clusters: lab, other)" in text, text[-3000:]
    assert LAUNCH_PLAY not in proc.stdout
    assert nothing_submitted(name)
