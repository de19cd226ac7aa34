"""playbooks/pcluster_cluster.yml against a real moto server: bad requests stop before anything is built,
uploaded or rendered, naming the key; a render-only run uploads the node bundle, its sha256 and the
bootstrap script to the foundation's bucket, renders the configuration from the foundation's record and the
AMI found by the spec's tags, and a second run changes nothing. The refusals reach moto through
AWS_ENDPOINT_URL, the full run through -e aws_endpoint_url alone.

The foundation record is written here as cluster_foundation records it (its own run is the walkthrough's test,
tests/integration/cluster/test_walkthrough.py); the AMI stands in for the one `make image-ami` builds.
The refusals take a few seconds each; the full run builds the bundle twice (about 30 s a run on a 2-core
machine), so it is marked slow.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import CURRENT_STACK_ID, REPO, MotoServer, moto_aws_env, playbook, start_moto

pytestmark = [pytest.mark.moto, pytest.mark.cluster]

SPEC = REPO / "inventories" / "aws" / "clusters" / "p4d.yml"
REGION = "us-east-1"
BUCKET = "example-training-data"  # the p4d spec's data_repository_path: the cluster's bucket
AMI_TAGS = {"trainstack:stack": CURRENT_STACK_ID, "trainstack:role": "training"}  # the p4d spec's image.tags


@dataclass
class World:
    moto: MotoServer
    ami: str


@dataclass
class Dirs:
    """Where one run records, builds and renders (never the repository's build/)."""

    records: Path
    bundle: Path
    configs: Path

    def args(self) -> list[str]:
        return [
            "-e",
            f"cluster_foundation_outputs_dir={self.records}",
            "-e",
            f"node_bundle_dir={self.bundle}",
            "-e",
            f"pcluster_cluster_config_dir={self.configs}",
        ]


def outputs(bucket: str = BUCKET, **changes: str) -> dict[str, str]:
    """aws_foundation_outputs as cluster_foundation records them for the p4d spec."""
    return {
        "cluster_name": "train-p4d",
        "region": REGION,
        "availability_zone": "us-east-1a",
        "vpc_id": "vpc-0123456789abcdef0",
        "public_subnet_id": "subnet-0aaaaaaaaaaaaaaa1",
        "private_subnet_id": "subnet-0bbbbbbbbbbbbbbb2",
        "security_group_id": "sg-0ccccccccccccccc3",
        "bucket": bucket,
        "instance_profile_arn": "arn:aws:iam::123456789012:instance-profile/trainstack-train-p4d-node",
        "fsx_file_system_id": "fs-0ddddddddddddddd4",
        "placement_group": "",
        **changes,
    }


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    server = start_moto()
    ec2 = server.client("ec2", REGION)
    source = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    instance = ec2.run_instances(ImageId=source, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    tags = [{"Key": k, "Value": v} for k, v in AMI_TAGS.items()]
    ami = ec2.create_image(
        InstanceId=instance,
        Name=f"trainstack-{CURRENT_STACK_ID}-pcluster-gpu-ubuntu2204-20261201-000000",
        TagSpecifications=[{"ResourceType": "image", "Tags": tags}],
    )["ImageId"]
    server.client("s3", REGION).create_bucket(Bucket=BUCKET)
    yield World(server, ami)
    server.stop()


@pytest.fixture
def dirs(tmp_path: Path) -> Dirs:
    found = Dirs(tmp_path / "records", tmp_path / "bundle", tmp_path / "configs")
    found.records.mkdir()
    return found


def record(dirs: Dirs, data: dict[str, Any]) -> None:
    (dirs.records / f"{data['cluster_name']}.foundation.json").write_text(json.dumps(data))


def pcluster_cluster(
    world: World, dirs: Dirs, *extra: str, endpoint_variable: bool = False
) -> subprocess.CompletedProcess:
    """The playbook against moto: through AWS_ENDPOINT_URL, as cluster_foundation is run, or with
    ``endpoint_variable`` through -e aws_endpoint_url alone (no AWS_ENDPOINT_URL in the environment)."""
    env = moto_aws_env(world.moto.url)
    if endpoint_variable:
        del env["AWS_ENDPOINT_URL"]
        extra = (*extra, "-e", f"aws_endpoint_url={world.moto.url}")
    return playbook("pcluster_cluster", *dirs.args(), *extra, check=False, env=env, timeout=600)


def bucket_keys(world: World, bucket: str = BUCKET) -> list[str]:
    answer = world.moto.client("s3", REGION).list_objects_v2(Bucket=bucket)
    return sorted(o["Key"] for o in answer.get("Contents", []))


def error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode != 0, proc.stdout[-3000:]
    text = proc.stdout + proc.stderr
    assert "[ERROR]" in text, text[-3000:]
    return text


# ------------------------------------------------------------------ refused before anything is made
@pytest.mark.parametrize(
    ("extra", "record_data", "message"),
    [
        ([], outputs(), "cluster_spec is required: -e cluster_spec=<file>"),
        (
            ["-e", f"cluster_spec={SPEC}", "-e", "pcluster_action=destroy"],
            outputs(),
            "pcluster_action must be one of create, update, delete or none (got destroy)",
        ),
        (
            ["-e", f"cluster_spec={SPEC}", "-e", "pcluster_cluster_ami_id=ubuntu"],
            outputs(),
            "pcluster_cluster_ami_id must be an AMI id",
        ),
        (["-e", f"cluster_spec={SPEC}"], None, "train-p4d.foundation.json; run"),
        (
            ["-e", f"cluster_spec={SPEC}"],
            outputs(region="eu-west-1"),
            "foundation outputs: region is 'eu-west-1' but the spec's region is 'us-east-1'",
        ),
        (
            ["-e", f"cluster_spec={SPEC}"],
            outputs(bucket="no-such-bucket"),
            "foundation outputs: bucket no-such-bucket does not exist",
        ),
        (
            ["-e", f"cluster_spec={SPEC}", "-e", '{"pcluster_cluster_ami_owners": ["111122223333"]}'],
            outputs(),
            f"image.tags {json.dumps(AMI_TAGS)}: no available AMI "
            "of 111122223333 in us-east-1 carries these tags",
        ),
    ],
    ids=["no-spec", "bad-action", "bad-ami-id", "no-record", "other-region", "no-bucket", "no-ami"],
)
def test_a_bad_request_is_refused_before_anything_is_made(
    world: World, dirs: Dirs, extra: list[str], record_data: dict | None, message: str
) -> None:
    if record_data is not None:
        record(dirs, record_data)
    before = bucket_keys(world)
    text = error(pcluster_cluster(world, dirs, *extra))
    assert message in " ".join(text.split()), text[-3000:]
    assert "Build and upload the node bundle" not in text
    assert bucket_keys(world) == before
    assert not dirs.bundle.exists() and not dirs.configs.exists()


# ------------------------------------------------------------------ render only, twice
def changed(proc: subprocess.CompletedProcess) -> int:
    recap = next(line for line in proc.stdout.splitlines() if line.startswith("localhost "))
    return int(recap.split("changed=")[1].split()[0])


@pytest.mark.slow
def test_render_only_uploads_the_bundle_renders_and_a_second_run_changes_nothing(
    world: World, dirs: Dirs
) -> None:
    record(dirs, outputs())
    first = pcluster_cluster(world, dirs, "-e", f"cluster_spec={SPEC}", endpoint_variable=True)
    assert first.returncode == 0, first.stdout[-4000:]
    digest = (dirs.bundle / "node-bundle.tar.gz.sha256").read_text().split()[0]
    assert hashlib.sha256((dirs.bundle / "node-bundle.tar.gz").read_bytes()).hexdigest() == digest
    bundle_key = f"trainstack/bundles/{digest}.tar.gz"
    assert set(bucket_keys(world)) >= {"trainstack/bootstrap.sh", bundle_key, f"{bundle_key}.sha256"}
    s3 = world.moto.client("s3", REGION)
    uploaded = s3.get_object(Bucket=BUCKET, Key=bundle_key)["Body"].read()
    assert hashlib.sha256(uploaded).hexdigest() == digest
    sha_file = s3.get_object(Bucket=BUCKET, Key=f"{bundle_key}.sha256")["Body"].read().decode()
    assert sha_file.split()[0] == digest

    config = yaml.safe_load((dirs.configs / "train-p4d.yaml").read_text())
    assert config["Image"]["CustomAmi"] == world.ami
    assert config["HeadNode"]["Networking"]["SubnetId"] == "subnet-0aaaaaaaaaaaaaaa1"
    assert config["HeadNode"]["Iam"]["InstanceProfile"] == outputs()["instance_profile_arn"]
    assert config["HeadNode"]["CustomActions"]["OnNodeConfigured"] == {
        "Script": f"s3://{BUCKET}/trainstack/bootstrap.sh",
        "Args": ["head", "--bundle", f"s3://{BUCKET}/{bundle_key}", "--sha256", digest],
    }
    (queue,) = config["Scheduling"]["SlurmQueues"]
    assert queue["Networking"]["SubnetIds"] == ["subnet-0bbbbbbbbbbbbbbb2"]
    assert config["SharedStorage"][0]["FsxLustreSettings"] == {"FileSystemId": "fs-0ddddddddddddddd4"}
    assert "pcluster_action=create" in first.stdout

    objects = {o["Key"]: o["ETag"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]}
    rendered = (dirs.configs / "train-p4d.yaml").read_text()
    again = pcluster_cluster(world, dirs, "-e", f"cluster_spec={SPEC}", endpoint_variable=True)
    assert again.returncode == 0, again.stdout[-4000:]
    assert changed(again) == 0, again.stdout[-4000:]
    assert {o["Key"]: o["ETag"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]} == objects
    assert (dirs.configs / "train-p4d.yaml").read_text() == rendered
