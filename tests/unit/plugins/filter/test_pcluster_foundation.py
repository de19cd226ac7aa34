"""pcluster_foundation: the foundation's recorded outputs become the renderer's foundation argument, and a
record that belongs to another cluster, or lacks what the renderer needs, is refused naming the key."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.trainstack.cluster.plugins.filter.cluster import pcluster_foundation
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.cluster_spec import load_file
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.pcluster_render import render

from tests.support import REPO

SPEC = load_file(REPO / "inventories" / "aws" / "clusters" / "p4d.yml")
# aws_foundation_outputs as the role sets them (and cluster_foundation records them) for the p4d example.
OUTPUTS: dict[str, Any] = {
    "cluster_name": "train-p4d",
    "region": "us-east-1",
    "availability_zone": "us-east-1a",
    "vpc_id": "vpc-0123456789abcdef0",
    "public_subnet_id": "subnet-0aaaaaaaaaaaaaaa1",
    "private_subnet_id": "subnet-0bbbbbbbbbbbbbbb2",
    "security_group_id": "sg-0ccccccccccccccc3",
    "bucket": "example-training-data",
    "instance_role_name": "trainstack-train-p4d-node",
    "instance_role_arn": "arn:aws:iam::123456789012:role/trainstack-train-p4d-node",
    "instance_profile_name": "trainstack-train-p4d-node",
    "instance_profile_arn": "arn:aws:iam::123456789012:instance-profile/trainstack-train-p4d-node",
    "fsx_file_system_id": "fs-0ddddddddddddddd4",
    "fsx_dns_name": "fs-0ddddddddddddddd4.fsx.us-east-1.amazonaws.com",
    "fsx_mount_name": "abcdefgh",
    "placement_group": "train-p4d-cluster",
}
DIGEST = "ab" * 32


def test_each_output_lands_on_the_key_the_renderer_reads() -> None:
    assert pcluster_foundation(OUTPUTS, SPEC, bundle_sha256=DIGEST) == {
        "subnet_public": "subnet-0aaaaaaaaaaaaaaa1",
        "subnet_private": "subnet-0bbbbbbbbbbbbbbb2",
        "security_group": "sg-0ccccccccccccccc3",
        "bucket": "example-training-data",
        "instance_profile": "arn:aws:iam::123456789012:instance-profile/trainstack-train-p4d-node",
        "fsx_file_system_id": "fs-0ddddddddddddddd4",
        "placement_group": "train-p4d-cluster",
        "bundle_sha256": DIGEST,
    }


def test_the_mapping_renders_where_the_foundation_put_things() -> None:
    """Through the real renderer: head node in the public subnet, queues in the private one, the foundation's
    profile, placement group and file system."""
    config = render(SPEC, pcluster_foundation(OUTPUTS, SPEC, bundle_sha256=DIGEST), "ami-0123456789abcdef0")
    assert config["HeadNode"]["Networking"]["SubnetId"] == OUTPUTS["public_subnet_id"]
    assert config["HeadNode"]["Iam"] == {"InstanceProfile": OUTPUTS["instance_profile_arn"]}
    (queue,) = config["Scheduling"]["SlurmQueues"]
    assert queue["Networking"]["SubnetIds"] == [OUTPUTS["private_subnet_id"]]
    assert queue["Networking"]["AdditionalSecurityGroups"] == [OUTPUTS["security_group_id"]]
    assert queue["Networking"]["PlacementGroup"]["Name"] == "train-p4d-cluster"
    (storage,) = config["SharedStorage"]
    assert storage["FsxLustreSettings"] == {"FileSystemId": OUTPUTS["fsx_file_system_id"]}


def test_empty_outputs_are_left_to_the_renderer_and_a_database_is_passed_on() -> None:
    outputs = {**OUTPUTS, "fsx_file_system_id": "", "placement_group": "", "instance_profile_arn": ""}
    database = {"uri": "db:3306", "user_name": "slurm", "password_secret_arn": "arn:aws:secretsmanager:x"}
    found = pcluster_foundation(outputs, SPEC, database=database)
    assert not {"fsx_file_system_id", "placement_group", "instance_profile", "bundle_sha256"} & set(found)
    assert found["database"] == database


@pytest.mark.parametrize(
    ("outputs", "message"),
    [
        ({**OUTPUTS, "bucket": ""}, "foundation outputs: bucket is missing or empty"),
        (
            {k: v for k, v in OUTPUTS.items() if k != "security_group_id"},
            "foundation outputs: security_group_id is missing or empty",
        ),
        (
            {**OUTPUTS, "cluster_name": "train-p5"},
            "foundation outputs: cluster_name is 'train-p5' but the spec's name is 'train-p4d'",
        ),
        (
            {**OUTPUTS, "region": "eu-west-1"},
            "foundation outputs: region is 'eu-west-1' but the spec's region is 'us-east-1'",
        ),
        (["not", "a", "mapping"], "foundation outputs must be a mapping (aws_foundation_outputs), not list"),
    ],
    ids=["no-bucket", "no-security-group", "other-cluster", "other-region", "not-a-mapping"],
)
def test_a_record_that_does_not_fit_is_refused_naming_the_key(outputs: Any, message: str) -> None:
    with pytest.raises(AnsibleFilterError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        pcluster_foundation(outputs, SPEC)
