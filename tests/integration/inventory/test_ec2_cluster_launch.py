"""launch_training -e cluster=<name> on a PCS cluster the ec2_cluster inventory finds in moto: AWS runs its
Slurm controller outside the account, so the launch goes to its login node group. (ParallelCluster and
HyperPod clusters have a head group; test_pcluster_inventory.py covers that path.) The hosts run on this
machine (ansible_connection=local through compose) and the launch is a --check of the local launcher, so only
the choice of host is under test here.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench.support import moto_fleet
from tests.support import VENV_BIN, playbook

from .test_ec2_cluster_inventory import ALL_KINDS

pytestmark = pytest.mark.moto
LAUNCH_PLAY = "PLAY [Launch a training test case]"
LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": str(VENV_BIN / "python")}


@pytest.fixture
def inventory(runner, fleet) -> Path:
    compose = "compose:\n" + "".join(
        f"  {key}: {json.dumps(json.dumps(value))}\n" for key, value in LOCAL.items()
    )
    return runner.write(ALL_KINDS + compose, name="launch")


def launch(inventory: Path, tmp_path: Path, cluster: str) -> subprocess.CompletedProcess:
    """pytorch/ddp through the local launcher in check mode, on the host that -e cluster=<name> picks."""
    return playbook(
        "launch_training",
        "-i",
        str(inventory),
        "-e",
        f"cluster={cluster}",
        *("-e", "training_job_testcase=pytorch/ddp", "-e", "training_job_launcher=local"),
        *("-e", "training_job_venv=false", "-e", f"training_job_python={VENV_BIN / 'python'}"),
        *("-e", f"training_job_shared_dir={tmp_path / 'shared'}"),
        *("-e", f"training_job_results_dir={tmp_path / 'results'}"),
        "--check",
        check=False,
        env=moto_fleet.clean_aws_env(moto_fleet.KEYS),
        timeout=600,
    )


def launched_on(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, proc.stdout[-3000:]
    launched = proc.stdout.split(LAUNCH_PLAY, 1)[1]
    assert "Check mode: pytorch/ddp passed every check" in launched
    hosts = {
        line.split("[", 1)[1].split("]", 1)[0].split(" -> ")[0]
        for line in launched.splitlines()
        if line.startswith("ok: [")
    }
    assert len(hosts) == 1, sorted(hosts)
    (host,) = hosts
    return host


def test_a_pcs_cluster_is_launched_from_its_login_node(inventory: Path, fleet, tmp_path: Path) -> None:
    assert [launched_on(launch(inventory, tmp_path, "pcs_abc123"))] == fleet.dns("pcs/pcs_login")
    assert not (tmp_path / "shared").exists()
