"""The walkthrough of docs/aws-hyperpod.md, read from the page and run as written.

Its commands are the lines of the ```sh blocks under "## Walkthrough". The fast test holds the page to the
steps (foundation, node bundle, cluster, delete, teardown, each from the example spec). The slow one runs them
in order against a real moto server, with what moto needs (AWS_ENDPOINT_URL, the foundation switches for what
it lacks) and every record, bundle and lifecycle file in a temporary directory; the cluster step runs twice,
the second time changing nothing. The foundation and the node bundle take minutes on a 2-core host.

moto's FSx leaves out the file system's MountName, which AWS always answers and the cluster step needs: the
server is moto_server_fsx.py (moto with AWS's MountName added in the server process), and the mount name the
nodes are given must be the one FSx answered.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO, VENV_BIN, MotoServer, moto_aws_env, start_moto

pytestmark = [pytest.mark.cluster]

DOC = REPO / "docs" / "aws-hyperpod.md"
MOTO_WITH_MOUNT_NAME = Path(__file__).with_name("moto_server_fsx.py")
HEADING = "## Walkthrough\n"
SPEC = "inventories/aws/hyperpod/train-hp.yml"
REGION = "us-east-1"


def walkthrough() -> list[str]:
    """The commands of the walkthrough's ```sh blocks, continuation lines joined, in page order."""
    section = DOC.read_text().split(HEADING, 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", section, re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.strip().startswith("#"):
                commands.append(line.strip())
    return commands


def test_the_walkthrough_is_foundation_bundle_cluster_delete_teardown() -> None:
    commands = walkthrough()
    steps = [re.search(r"trainstack\.cluster\.(\w+)", c).group(1) for c in commands]
    assert steps == [
        "cluster_foundation",
        "node_bundle",
        "hyperpod_cluster",
        "hyperpod_cluster",
        "cluster_teardown",
    ]
    assert all(f"-e cluster_spec={SPEC}" in c for c in commands if "node_bundle" not in c)
    assert "hyperpod_cluster_state=absent" in commands[3] and "state" not in commands[2]
    assert (REPO / SPEC).is_file()


def run_here(url: str, extra_vars: Path, command: str) -> subprocess.CompletedProcess:
    env = moto_aws_env(url, PATH=f"{VENV_BIN}:/usr/bin:/bin")
    done = subprocess.run(
        ["bash", "-c", f"{command} -e @{extra_vars}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, f"{command}\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    return done


def create_lustre(server: MotoServer, deployment: str) -> dict:
    """A Lustre file system as the foundation asks for one, as the server answers its creation."""
    ec2 = server.client("ec2", REGION)
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.1.0/24")["Subnet"]["SubnetId"]
    return server.client("fsx", REGION).create_file_system(
        FileSystemType="LUSTRE",
        StorageCapacity=1200,
        SubnetIds=[subnet],
        LustreConfiguration={"DeploymentType": deployment},
    )["FileSystem"]


@pytest.mark.moto
def test_moto_lacks_the_mount_name_and_the_test_server_adds_it_as_aws_does() -> None:
    """Plain moto answers no MountName (when it does, moto_server_fsx.py can go); the test server answers
    AWS's: eight lowercase letters and digits, `fsx` for SCRATCH_1, the same on every describe."""
    plain = start_moto()
    try:
        assert "MountName" not in create_lustre(plain, "PERSISTENT_2").get("LustreConfiguration", {})
    finally:
        plain.stop()
    server = start_moto(server=MOTO_WITH_MOUNT_NAME)
    try:
        made = create_lustre(server, "PERSISTENT_2")
        mount_name = made["LustreConfiguration"]["MountName"]
        assert re.fullmatch(r"[a-z0-9]{8}", mount_name)
        described = server.client("fsx", REGION).describe_file_systems(FileSystemIds=[made["FileSystemId"]])
        assert described["FileSystems"][0]["LustreConfiguration"]["MountName"] == mount_name
        assert create_lustre(server, "SCRATCH_1")["LustreConfiguration"]["MountName"] == "fsx"
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.moto
def test_the_walkthrough_runs_against_moto(tmp_path: Path) -> None:
    server = start_moto(env={"MOTO_IAM_LOAD_MANAGED_POLICIES": "true"}, server=MOTO_WITH_MOUNT_NAME)
    try:
        extra = tmp_path / "extra.json"
        extra.write_text(
            json.dumps(
                {
                    "aws_foundation_placement_group": False,
                    "aws_foundation_fsx_link_bucket": False,
                    "cluster_foundation_outputs_dir": str(tmp_path / "records"),
                    "node_bundle_dir": str(tmp_path / "bundle"),
                    "hyperpod_cluster_lifecycle_dir": str(tmp_path / "lifecycle"),
                    "hyperpod_cluster_poll_interval": 1,
                }
            )
        )
        foundation, bundle, cluster, delete, teardown = walkthrough()
        run_here(server.url, extra, foundation)
        record = json.loads((tmp_path / "records" / "train-hp.foundation.json").read_text())
        fsx = server.client("fsx", REGION).describe_file_systems(FileSystemIds=[record["fsx_file_system_id"]])
        mount_name = fsx["FileSystems"][0]["LustreConfiguration"]["MountName"]
        assert record["fsx_mount_name"] == mount_name
        run_here(server.url, extra, bundle)
        run_here(server.url, extra, cluster)
        parameters = json.loads(
            (tmp_path / "lifecycle" / "train-hp" / "provisioning_parameters.json").read_text()
        )
        assert parameters["fsx_mountname"] == mount_name
        assert parameters["fsx_dns_name"] == record["fsx_dns_name"]
        sagemaker = server.client("sagemaker", REGION)
        assert sagemaker.describe_cluster(ClusterName="train-hp")["ClusterStatus"] == "InService"
        again = run_here(server.url, extra, cluster)
        assert re.search(r"^localhost\s.*\bchanged=0\b", again.stdout, re.M), again.stdout[-3000:]
        run_here(server.url, extra, delete)
        assert sagemaker.list_clusters()["ClusterSummaries"] == []
        run_here(server.url, extra, teardown)
        assert not (tmp_path / "records" / "train-hp.foundation.json").exists()
    finally:
        server.stop()
