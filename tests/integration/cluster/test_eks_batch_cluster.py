"""playbooks/eks_cluster.yml and playbooks/batch_cluster.yml against a real moto server (one for this module).

A spec and a foundation record become an EKS cluster with a node group on a launch template of the AMI found
by the spec's image.tags, and a Batch compute environment, job queue and job definitions; a second run changes
nothing (changed=0); state=absent deletes everything. A bad spec stops before any call: moto then holds no
cluster, launch template or Batch resource. The foundation record is written here as cluster_foundation
records it; the VPC, subnet, security group and instance profile it names are made in moto, where Batch looks
them up.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import CURRENT_STACK_ID, REPO, MotoServer, moto_aws_env, playbook, start_moto

pytestmark = [pytest.mark.moto, pytest.mark.cluster]

EKS_SPEC = REPO / "inventories" / "aws" / "eks" / "train-eks.yml"
BATCH_SPEC = REPO / "inventories" / "aws" / "batch" / "train-batch.yml"
CLUSTER_ROLE = "arn:aws:iam::123456789012:role/trainstack-train-eks-cluster"


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = start_moto()
    yield server
    server.stop()


def foundation(moto: MotoServer, spec: Path) -> dict[str, str]:
    """What cluster_foundation makes and records for `spec`, made in moto (Batch checks that it exists)."""
    data = yaml.safe_load(spec.read_text())
    region, name = data["region"], data["name"]
    ec2, iam = moto.client("ec2", region), moto.client("iam", region)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{n}.0/24", AvailabilityZone=data["availability_zone"])[
            "Subnet"
        ]["SubnetId"]
        for n in (1, 2)
    ]
    group = ec2.create_security_group(GroupName=f"trainstack-{name}", Description="efa", VpcId=vpc)["GroupId"]
    role = iam.create_role(RoleName=f"trainstack-{name}-node", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    cluster_role = iam.create_role(RoleName=f"trainstack-{name}-eks-cluster", AssumeRolePolicyDocument="{}")[
        "Role"
    ]["Arn"]
    # EKS's second zone: the foundation makes a private subnet there for the control plane.
    second = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.64.0/18", AvailabilityZone=f"{region}b")["Subnet"]
    profile = iam.create_instance_profile(InstanceProfileName=f"trainstack-{name}-node")["InstanceProfile"][
        "Arn"
    ]
    image = ec2.register_image(Name=f"trainstack-{CURRENT_STACK_ID}-{name}", RootDeviceName="/dev/xvda")[
        "ImageId"
    ]
    tags = [{"Key": k, "Value": v} for k, v in data["image"]["tags"].items()]
    ec2.create_tags(Resources=[image], Tags=tags)
    return {
        "cluster_name": name,
        "region": region,
        "availability_zone": data["availability_zone"],
        "vpc_id": vpc,
        "public_subnet_id": subnets[0],
        "private_subnet_id": subnets[1],
        "security_group_id": group,
        "instance_role_arn": role,
        "eks_cluster_role_arn": cluster_role,
        "eks_node_role_arn": role,
        "second_private_subnet_id": second["SubnetId"],
        "instance_profile_arn": profile,
        "placement_group": f"trainstack-{name}",
        "ami": image,
    }


def run(moto: MotoServer, name: str, records: Path, spec: Path, *extra: str) -> subprocess.CompletedProcess:
    return playbook(
        name,
        "-e",
        f"cluster_spec={spec}",
        "-e",
        f"cluster_foundation_outputs_dir={records}",
        "-e",
        f"{name}_poll_interval=1",
        *extra,
        check=False,
        env=moto_aws_env(moto.url),
    )


def changed(proc: subprocess.CompletedProcess) -> int:
    return int(re.search(r"^localhost\s.*\bchanged=(\d+)", proc.stdout, re.M).group(1))


def record(records: Path, outputs: dict[str, Any]) -> None:
    records.mkdir(exist_ok=True)
    body = {k: v for k, v in outputs.items() if k != "ami"}
    (records / f"{outputs['cluster_name']}.foundation.json").write_text(json.dumps(body))


def eks_held(moto: MotoServer) -> tuple[list[str], list[str]]:
    templates = moto.client("ec2", "us-west-2").describe_launch_templates()["LaunchTemplates"]
    return moto.client("eks", "us-west-2").list_clusters()["clusters"], [
        t["LaunchTemplateName"] for t in templates
    ]


def test_eks_create_again_unchanged_then_delete(moto: MotoServer, tmp_path: Path) -> None:
    outputs = foundation(moto, EKS_SPEC)
    role = ("-e", f"eks_cluster_role_arn={CLUSTER_ROLE}")

    # A record without a cluster role (a foundation made for another orchestrator) and no -e: refused,
    # naming the variable; with -e the run gets past that check (here to the bad spec's refusal).
    roleless = tmp_path / "roleless"
    record(roleless, {k: v for k, v in outputs.items() if k != "eks_cluster_role_arn"})
    refused = run(moto, "eks_cluster", roleless, EKS_SPEC)
    said = " ".join(refused.stdout.split())
    assert refused.returncode != 0 and "eks_cluster_role_arn: the record" in said, refused.stdout[-3000:]
    bad = tmp_path / "bad.yml"
    bad.write_text(EKS_SPEC.read_text().replace("os: amzn-2023", "os: ubuntu-22.04"))
    refused = run(moto, "eks_cluster", roleless, bad, *role)
    assert refused.returncode != 0 and "image.os: EKS nodes boot the eks-gpu image" in refused.stdout
    assert eks_held(moto) == ([], [])

    # The roles and the second zone's subnet come from the record.
    record(tmp_path, outputs)
    first = run(moto, "eks_cluster", tmp_path, EKS_SPEC)
    assert first.returncode == 0, first.stdout[-4000:]
    eks = moto.client("eks", "us-west-2")
    cluster = eks.describe_cluster(name="train-eks")["cluster"]
    assert cluster["roleArn"] == outputs["eks_cluster_role_arn"]
    assert outputs["second_private_subnet_id"] in cluster["resourcesVpcConfig"]["subnetIds"]
    group = eks.describe_nodegroup(clusterName="train-eks", nodegroupName="h100")["nodegroup"]
    assert group["nodeRole"] == outputs["eks_node_role_arn"]
    assert group["subnets"] == [outputs["private_subnet_id"]]
    versions = moto.client("ec2", "us-west-2").describe_launch_template_versions(
        LaunchTemplateName="trainstack-eks-train-eks-h100"
    )["LaunchTemplateVersions"]
    assert versions[0]["LaunchTemplateData"]["ImageId"] == outputs["ami"]  # found by the spec's image.tags
    assert len(versions[0]["LaunchTemplateData"]["NetworkInterfaces"]) == 32

    again = run(moto, "eks_cluster", tmp_path, EKS_SPEC, *role)
    assert again.returncode == 0 and changed(again) == 0, again.stdout[-3000:]

    gone = run(moto, "eks_cluster", tmp_path, EKS_SPEC, "-e", "eks_cluster_state=absent")
    assert gone.returncode == 0 and changed(gone) == 1, gone.stdout[-3000:]
    assert eks_held(moto) == ([], [])


def batch_held(moto: MotoServer) -> list[str]:
    batch = moto.client("batch", "us-east-1")
    return [
        c["computeEnvironmentName"] for c in batch.describe_compute_environments()["computeEnvironments"]
    ] + [d["jobDefinitionName"] for d in batch.describe_job_definitions(status="ACTIVE")["jobDefinitions"]]


def test_batch_create_again_unchanged_then_delete(moto: MotoServer, tmp_path: Path) -> None:
    outputs = foundation(moto, BATCH_SPEC)
    record(tmp_path, outputs)
    iam = moto.client("iam", "us-east-1")
    service = iam.create_role(RoleName="trainstack-batch-service", AssumeRolePolicyDocument="{}")["Role"][
        "Arn"
    ]
    args = (
        "-e",
        "batch_cluster_image=registry.example/trainstack:1",
        "-e",
        f"batch_cluster_service_role={service}",
    )

    refused = run(
        moto, "batch_cluster", tmp_path, BATCH_SPEC, *args, "-e", '{"batch_cluster_test_cases": ["x/y"]}'
    )
    assert refused.returncode != 0 and "test_cases: 'x/y' is not a test case" in refused.stdout
    assert batch_held(moto) == []

    # An AMI of another flavour with the same stack, as an account holds: the look-up must not take it, and a
    # spec that names its flavour is refused before anything is made.
    ec2 = moto.client("ec2", "us-east-1")
    other = ec2.register_image(Name="trainstack-eks-gpu", RootDeviceName="/dev/xvda")["ImageId"]
    stack_tag = yaml.safe_load(BATCH_SPEC.read_text())["image"]["tags"]["trainstack:stack"]
    ec2.create_tags(
        Resources=[other],
        Tags=[
            {"Key": "trainstack:stack", "Value": stack_tag},
            {"Key": "trainstack:flavour", "Value": "eks-gpu"},
        ],
    )
    eks_flavour = tmp_path / "eks-flavour.yml"
    data = yaml.safe_load(BATCH_SPEC.read_text())
    data["image"]["tags"]["trainstack:flavour"] = "eks-gpu"
    eks_flavour.write_text(yaml.safe_dump(data))
    wrong = run(moto, "batch_cluster", tmp_path, eks_flavour, *args)
    assert wrong.returncode != 0
    assert "image.tags: trainstack:flavour is 'eks-gpu'; these nodes boot the batch-gpu image" in wrong.stdout
    assert batch_held(moto) == []

    first = run(moto, "batch_cluster", tmp_path, BATCH_SPEC, *args)
    assert first.returncode == 0, first.stdout[-4000:]
    (environment,) = moto.client("batch", "us-east-1").describe_compute_environments()["computeEnvironments"]
    assert environment["computeResources"]["ec2Configuration"][0]["imageIdOverride"] == outputs["ami"]
    assert sorted(batch_held(moto)) == [
        "train-batch-a100",
        "train-batch-a100-nccl-collectives",
        "train-batch-a100-pytorch-fsdp",
    ]
    again = run(moto, "batch_cluster", tmp_path, BATCH_SPEC, *args)
    assert again.returncode == 0 and changed(again) == 0, again.stdout[-3000:]
    gone = run(moto, "batch_cluster", tmp_path, BATCH_SPEC, "-e", "batch_cluster_state=absent")
    assert gone.returncode == 0 and changed(gone) == 1, gone.stdout[-3000:]
    assert batch_held(moto) == []
