"""The walkthrough of docs/aws-eks.md, read from the page and run as written.

Its commands are the lines of the ```sh blocks under "## Walkthrough". The fast test holds the page to the
steps (foundation, cluster, delete, teardown, each from the example spec). The slow one runs them in order
against a real moto server, with an image tagged as the image factory tags the eks-gpu AMI standing in for the
image step (Packer cannot finish a build against moto), and every record in a temporary directory; the cluster
step runs twice, the second time changing nothing. The foundation takes minutes on a 2-core host.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support import REPO, VENV_BIN, moto_aws_env, start_moto

pytestmark = [pytest.mark.cluster]

DOC = REPO / "docs" / "aws-eks.md"
HEADING = "## Walkthrough\n"
SPEC = "inventories/aws/eks/train-eks.yml"
REGION = "us-west-2"


def walkthrough() -> list[str]:
    """The commands of the walkthrough's ```sh blocks, continuation lines joined, in page order."""
    section = DOC.read_text().split(HEADING, 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", section, re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.strip().startswith("#"):
                commands.append(line.strip())
    return commands


def test_the_walkthrough_is_foundation_cluster_delete_teardown() -> None:
    commands = walkthrough()
    steps = [re.search(r"trainstack\.cluster\.(\w+)", c).group(1) for c in commands]
    assert steps == ["cluster_foundation", "eks_cluster", "eks_cluster", "cluster_teardown"]
    assert all(f"-e cluster_spec={SPEC}" in c for c in commands)
    assert "eks_cluster_state=absent" in commands[2]
    # The foundation makes EKS's roles and second-zone subnet; the cluster step asks for none by hand.
    assert "cluster_orchestrator=eks" in commands[0] and "eks_cluster_role_arn" not in commands[1]
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


@pytest.mark.slow
@pytest.mark.moto
def test_the_walkthrough_runs_against_moto(tmp_path: Path) -> None:
    server = start_moto(env={"MOTO_IAM_LOAD_MANAGED_POLICIES": "true"})
    try:
        extra = tmp_path / "extra.json"
        extra.write_text(
            json.dumps(
                {
                    # moto answers CreatePlacementGroup with a server error: the foundation makes none, and
                    # the cluster step names the group the foundation would have made.
                    "aws_foundation_placement_group": False,
                    "eks_cluster_placement_group": "trainstack-train-eks",
                    "aws_foundation_fsx_link_bucket": False,
                    "cluster_foundation_outputs_dir": str(tmp_path / "records"),
                    "eks_cluster_poll_interval": 1,
                }
            )
        )
        foundation, cluster, delete, teardown = walkthrough()
        run_here(server.url, extra, foundation)
        ec2 = server.client("ec2", REGION)
        image = ec2.register_image(Name="trainstack-eks-gpu-stand-in", RootDeviceName="/dev/xvda")["ImageId"]
        tags = yaml.safe_load((REPO / SPEC).read_text())["image"]["tags"]
        ec2.create_tags(Resources=[image], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
        run_here(server.url, extra, cluster)
        eks = server.client("eks", REGION)
        assert eks.describe_cluster(name="train-eks")["cluster"]["status"] == "ACTIVE"
        assert (
            eks.describe_nodegroup(clusterName="train-eks", nodegroupName="h100")["nodegroup"]["status"]
            == "ACTIVE"
        )
        again = run_here(server.url, extra, cluster)
        assert re.search(r"^localhost\s.*\bchanged=0\b", again.stdout, re.M), again.stdout[-3000:]
        run_here(server.url, extra, delete)
        assert eks.list_clusters()["clusters"] == []
        run_here(server.url, extra, teardown)
        assert not (tmp_path / "records" / "train-eks.foundation.json").exists()
    finally:
        server.stop()
