"""The walkthrough of docs/aws-parallelcluster.md ("From spec to first training run"), read from the page and
run as written.

Its commands are the lines of the ```sh blocks under that heading. Those it marks `# needs AWS` must be
exactly the ones that cannot run here: they build an AMI on EC2 (Packer), call ParallelCluster, or reach the
cluster's instances. The fast test holds the page to that. The others run in order against a real moto
server (slow: 5 minutes, 2.4 CPU-minutes, on a busy 2-core host): the foundation, pcluster_cluster
render-only, once more to see it change nothing, and the teardown, with what the page says moto needs:
AWS_ENDPOINT_URL, the two foundation switches for what moto lacks, the spec's data bucket, and an AMI
carrying the spec's tags in place of the image step. Every record, bundle and rendered file goes to a
temporary directory, not build/.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.support import REPO, VENV_BIN, MotoServer, moto_aws_env, start_moto

pytestmark = [pytest.mark.cluster]

DOC = REPO / "docs" / "aws-parallelcluster.md"
HEADING = "## From spec to first training run\n"
MARK = "# needs AWS"
# What this machine cannot run, whatever the page says: an AMI build on EC2, ParallelCluster itself, and
# anything that reaches the instances of a cluster (validation, launch).
CANNOT_RUN_HERE = (
    re.compile(r"^make image-ami\b"),
    re.compile(r"^packer\b"),
    re.compile(r"^pcluster\b"),
    re.compile(r"-e pcluster_action=(create|update|delete)\b"),
    re.compile(r"\btrainstack\.cluster\.(validate_cluster|launch_training|nccl_acceptance)\b"),
)
SPEC = REPO / "inventories" / "aws" / "clusters" / "p4d.yml"
REGION = "us-east-1"


@dataclass(frozen=True)
class Command:
    text: str
    needs_aws: bool

    @property
    def playbook(self) -> str:
        match = re.search(r"\btrainstack\.cluster\.(\w+)", self.text)
        return match.group(1) if match else ""


def walkthrough() -> list[Command]:
    """The commands of the walkthrough's ```sh blocks, continuation lines joined, in page order."""
    section = DOC.read_text().split(HEADING, 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", section, re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                text, _sep, note = line.partition(" #")
                commands.append(Command(text.strip(), f"#{note}".strip() == MARK))
    return commands


def test_the_commands_marked_as_needing_aws_are_exactly_those_that_cannot_run_here() -> None:
    commands = walkthrough()
    assert commands, f"no ```sh commands under {HEADING.strip()} in {DOC}"
    for command in commands:
        cannot = any(p.search(command.text) for p in CANNOT_RUN_HERE)
        assert command.needs_aws == cannot, (command.text, "marked" if command.needs_aws else "not marked")
    runnable = [c.playbook for c in commands if not c.needs_aws]
    assert runnable == ["cluster_foundation", "pcluster_cluster", "cluster_teardown"], runnable
    # Every step, in order: foundation, image, cluster (render, create), validate, launch, delete, teardown.
    steps = [c.playbook or c.text.split()[0] for c in commands]
    assert steps == [
        "cluster_foundation",
        "make",
        "pcluster_cluster",
        "pcluster_cluster",
        "validate_cluster",
        "launch_training",
        "pcluster_cluster",
        "cluster_teardown",
    ], steps
    # The spec drives the foundation, the cluster and the teardown; the cluster's name the rest.
    spec = f"-e cluster_spec={SPEC.relative_to(REPO)}"
    from_spec = {"cluster_foundation", "pcluster_cluster", "cluster_teardown"}
    assert all(spec in c.text for c in commands if c.playbook in from_spec)
    assert all(
        "-e cluster=train-p4d" in c.text
        for c in commands
        if c.playbook in {"validate_cluster", "launch_training"}
    )


# ------------------------------------------------------------------ the runnable commands, against moto
@dataclass
class Moto:
    server: MotoServer
    extra_vars: Path
    records: Path
    configs: Path


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Moto]:
    """moto with AWS managed policies, the p4d spec's data bucket and an AMI carrying its image.tags."""
    server = start_moto(env={"MOTO_IAM_LOAD_MANAGED_POLICIES": "true"})
    spec = yaml.safe_load(SPEC.read_text())
    server.client("s3", REGION).create_bucket(Bucket="example-training-data")
    ec2 = server.client("ec2", REGION)
    source = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    instance = ec2.run_instances(ImageId=source, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    tags = [{"Key": k, "Value": v} for k, v in spec["image"]["tags"].items()]
    ec2.create_image(
        InstanceId=instance,
        Name="trainstack-walkthrough",
        TagSpecifications=[{"ResourceType": "image", "Tags": tags}],
    )
    ec2.terminate_instances(InstanceIds=[instance])
    work = tmp_path_factory.mktemp("walkthrough")
    found = Moto(server, work / "extra.json", work / "records", work / "configs")
    found.extra_vars.write_text(
        json.dumps(
            {
                "aws_foundation_placement_group": False,
                "aws_foundation_fsx_link_bucket": False,
                "cluster_foundation_outputs_dir": str(found.records),
                "node_bundle_dir": str(work / "bundle"),
                "pcluster_cluster_config_dir": str(found.configs),
            }
        )
    )
    yield found
    server.stop()


def run_here(moto: Moto, command: Command) -> subprocess.CompletedProcess:
    env = moto_aws_env(moto.server.url, PATH=f"{VENV_BIN}:/usr/bin:/bin")
    done = subprocess.run(
        ["bash", "-c", f"{command.text} -e @{moto.extra_vars}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, f"{command.text}\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    return done


def changed(done: subprocess.CompletedProcess) -> int:
    return sum(int(n) for n in re.findall(r"^localhost\s.*\bchanged=(\d+)", done.stdout, re.M))


@pytest.mark.slow
@pytest.mark.moto
def test_the_walkthrough_runs_against_moto(moto: Moto) -> None:
    foundation, render, teardown = [c for c in walkthrough() if not c.needs_aws]

    run_here(moto, foundation)
    record = json.loads((moto.records / "train-p4d.foundation.json").read_text())
    assert record["bucket"] == "example-training-data" and record["fsx_file_system_id"].startswith("fs-")

    run_here(moto, render)
    config = yaml.safe_load((moto.configs / "train-p4d.yaml").read_text())
    assert config["HeadNode"]["Networking"]["SubnetId"] == record["public_subnet_id"]
    assert config["Scheduling"]["SlurmQueues"][0]["Networking"]["SubnetIds"] == [record["private_subnet_id"]]
    assert config["SharedStorage"][0]["FsxLustreSettings"] == {"FileSystemId": record["fsx_file_system_id"]}
    keys = [
        o["Key"]
        for o in moto.server.client("s3", REGION).list_objects_v2(Bucket=record["bucket"])["Contents"]
    ]
    assert "trainstack/bootstrap.sh" in keys and any(k.endswith(".tar.gz.sha256") for k in keys)
    assert changed(run_here(moto, render)) == 0

    run_here(moto, teardown)
    assert not (moto.records / "train-p4d.foundation.json").exists()
    ec2 = moto.server.client("ec2", REGION)
    by_tag = [{"Name": "tag:trainstack:cluster", "Values": ["train-p4d"]}]
    assert ec2.describe_vpcs(Filters=by_tag)["Vpcs"] == []
