"""A ParallelCluster fleet in moto, found by the ec2_cluster inventory plugin through its endpoint option, and
launch_training's choice of host from it (`-e cluster=<name>`), without the lab: the hosts run on this
machine (ansible_connection=local through compose) and the launch is a --check of the local launcher.
A name that matches no cluster, and two clusters without a name, fail in the first play: the launch play
never starts. The real launch on the lab's Slurm is test_pcluster_launch_lab.py.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.support.moto_fleet import plain
from tests.support import VENV_BIN, MotoServer, playbook, run, start_moto

from .pcluster_fleet import Cluster, inventory_env, launch_clusters, write_inventory

pytestmark = [pytest.mark.moto, pytest.mark.cluster]

# Two clusters in one subnet; lab-a's addresses are those lab-up gives the lab's nodes.
CLUSTERS = [
    Cluster("lab-a", "10.77.0.11", {"compute": ["10.77.0.12", "10.77.0.13"]}),
    Cluster("lab-b", "10.77.0.200", {"gpu": ["10.77.0.201"]}),
]
LAUNCH_PLAY = "PLAY [Launch a training test case]"


@dataclass
class Fleet:
    inventory: Path
    instances: dict[str, str]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    server: MotoServer = start_moto()
    instances = launch_clusters(server, CLUSTERS)
    hostvars = {"ansible_connection": "local", "ansible_python_interpreter": str(VENV_BIN / "python")}
    yield Fleet(write_inventory(tmp_path_factory.mktemp("inventory"), server.url, hostvars), instances)
    server.stop()


@pytest.fixture(scope="module")
def listing(fleet: Fleet) -> dict:
    """ansible-inventory --list of the fleet's source, as a user would look at it."""
    done = run(
        [str(VENV_BIN / "ansible-inventory"), "-i", str(fleet.inventory), "--list"],
        env=inventory_env(),
        timeout=180,
    )
    return plain(json.loads(done.stdout))


def test_the_plugin_puts_each_node_in_its_cluster_and_role(fleet: Fleet, listing: dict) -> None:
    found = listing
    hostvars = found["_meta"]["hostvars"]

    def addresses(group: str) -> list[str]:
        return sorted(hostvars[h]["ansible_host"] for h in found[group]["hosts"])

    assert addresses("cluster_lab_a_head") == ["10.77.0.11"]
    assert addresses("cluster_lab_a_compute") == ["10.77.0.12", "10.77.0.13"]
    assert addresses("cluster_lab_a_queue_compute") == ["10.77.0.12", "10.77.0.13"]
    assert addresses("cluster_lab_b_head") == ["10.77.0.200"]
    assert sorted(found["role_head"]["hosts"]) == sorted(
        found["cluster_lab_a_head"]["hosts"] + found["cluster_lab_b_head"]["hosts"]
    )
    (head,) = found["cluster_lab_a_head"]["hosts"]
    assert hostvars[head]["ec2_instance_id"] == fleet.instances["10.77.0.11"]
    assert hostvars[head]["cluster_name"] == "lab-a"
    assert hostvars[head]["ansible_connection"] == "local"


def launch(fleet: Fleet, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    """launch_training on the fleet's inventory: pytorch/ddp through the local launcher, in check mode."""
    return playbook(
        "launch_training",
        "-i",
        str(fleet.inventory),
        "-e",
        "training_job_testcase=pytorch/ddp",
        "-e",
        "training_job_launcher=local",
        "-e",
        "training_job_venv=false",
        "-e",
        f"training_job_python={VENV_BIN / 'python'}",
        "-e",
        f"training_job_shared_dir={tmp_path / 'shared'}",
        "-e",
        f"training_job_results_dir={tmp_path / 'results'}",
        "--check",
        *extra,
        check=False,
        env=inventory_env(),
        timeout=600,
    )


def test_cluster_name_chooses_that_clusters_head(fleet: Fleet, listing: dict, tmp_path: Path) -> None:
    (head,) = listing["cluster_lab_a_head"]["hosts"]
    proc = launch(fleet, tmp_path, "-e", "cluster=lab-a")
    assert proc.returncode == 0, proc.stdout[-3000:]
    launched = proc.stdout.split(LAUNCH_PLAY, 1)[1]
    assert f"ok: [{head}]" in launched
    assert "Check mode: pytorch/ddp passed every check" in launched
    assert not (tmp_path / "shared").exists() and not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["-e", "cluster=lab-c"],
            "cluster=lab-c: no group cluster_lab_c_head in the inventory (clusters: lab_a, lab_b)",
        ),
        (
            [],
            "has 2 head hosts ({heads}), one is needed; pick one with -e cluster=<name> "
            "(clusters: lab_a, lab_b)",
        ),
    ],
    ids=["unknown-name", "two-clusters-no-name"],
)
def test_no_single_head_fails_before_the_launch_play(
    fleet: Fleet, listing: dict, tmp_path: Path, extra: list[str], message: str
) -> None:
    heads = ", ".join(listing["role_head"]["hosts"])
    proc = launch(fleet, tmp_path, *extra)
    assert proc.returncode != 0
    text = " ".join((proc.stdout + proc.stderr).split())
    assert message.format(heads=heads) in text, text[-3000:]
    assert "Nothing was submitted." in text
    assert LAUNCH_PLAY not in proc.stdout
