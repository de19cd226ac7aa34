"""amazon-ebs builds against moto's EC2 server: how far Packer gets, and what it asks EC2 for.

Packer 1.6.6 talks to moto through `custom_endpoint_ec2`. It gets through every EC2 step of a build (AMI
lookup by filter and owner, temporary key pair and security group, RunInstances with our volume, tags and
instance type) and stops at "Waiting for SSH": moto's instances are records, not machines. The SSH target is
pinned to a closed loopback port so nothing is sent to the address moto invents. Provisioning, AMI creation,
region copies and the IMDSv2 post-processor therefore never run here; the template tests cover their settings.
"""

import re

import boto3
import pytest

from tests.support import VENV_BIN

from .conftest import CURRENT_STACK, closed_port, packer

pytestmark = pytest.mark.moto


def build(moto_url, flavour, only, *extra):
    """`packer build` of the ami build's images matching `only` (-only globs), as `flavour`."""
    return packer(
        "build",
        "-color=false",
        f"-only={only}",
        "-var",
        f"flavour={flavour}",
        "-var",
        f"custom_endpoint_ec2={moto_url}",
        "-var",
        "skip_credential_validation=true",
        "-var",
        "ssh_host=127.0.0.1",
        "-var",
        f"ssh_port={closed_port()}",
        "-var",
        "ssh_timeout=3s",
        "-var",
        f"ansible_playbook={VENV_BIN / 'ansible-playbook'}",
        *extra,
        "packer",
    )


def test_build_reaches_ssh_wait_then_cleans_up(moto_ec2, aws_env, tmp_path):
    proc = build(moto_ec2, "slurm-gpu", "ami.amazon-ebs.ubuntu2204-x86_64", "-var", f"output_dir={tmp_path}")
    out = proc.stdout
    assert proc.returncode != 0
    steps = [
        "Found Image ID: ami-0standin2204x8601",
        "Creating temporary keypair",
        "Creating temporary security group",
        "Launching a source AWS instance",
        f'Adding tag: "trainstack:stack": "{CURRENT_STACK}"',
        "Waiting for SSH to become available",
        "Timeout waiting for SSH",
        "Terminating the source AWS instance",
        "Deleting temporary security group",
        "Deleting temporary keypair",
    ]
    positions = [out.find(step) for step in steps]
    assert all(p >= 0 for p in positions), [s for s, p in zip(steps, positions, strict=True) if p < 0]
    assert positions == sorted(positions), "steps out of order"
    ec2 = boto3.client("ec2", endpoint_url=moto_ec2)
    assert ec2.describe_key_pairs()["KeyPairs"] == []
    (reservation,) = ec2.describe_instances()["Reservations"]
    (instance,) = reservation["Instances"]
    assert instance["State"]["Name"] == "terminated"
    assert instance["ImageId"] == "ami-0standin2204x8601"


def test_run_instances_gets_our_volume_instance_type_and_tags(moto_ec2, aws_env, tmp_path):
    """-on-error=abort keeps the instance, so moto shows what Packer asked for."""
    proc = build(
        moto_ec2,
        "base-gpu",
        "ami.amazon-ebs.al2023-arm64",
        "-on-error=abort",
        "-var",
        "root_volume_gb=37",
        "-var",
        "instance_type_arm64=c7g.2xlarge",
        "-var",
        "stack_id=ts-2025.12",
        "-var",
        f"output_dir={tmp_path}",
    )
    assert "Found Image ID: ami-0standinal2023a01" in proc.stdout, proc.stdout[-3000:]
    ec2 = boto3.client("ec2", endpoint_url=moto_ec2)
    (reservation,) = ec2.describe_instances()["Reservations"]
    (instance,) = reservation["Instances"]
    assert instance["InstanceType"] == "c7g.2xlarge"
    assert instance["ImageId"] == "ami-0standinal2023a01"
    tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
    assert tags["trainstack:stack"] == "ts-2025.12"
    (volume,) = ec2.describe_volumes(
        Filters=[{"Name": "attachment.instance-id", "Values": [instance["InstanceId"]]}]
    )["Volumes"]
    assert (volume["Size"], volume["VolumeType"], volume["Encrypted"]) == (37, "gp3", True)
    assert volume["Attachments"][0]["Device"] == "/dev/xvda"


def test_a_baking_flavour_tags_its_build_with_the_test_cases_it_bakes(moto_ec2, aws_env, tmp_path):
    """-var pytorch_testcases reaches the build: the instance Packer starts (and the AMI) carries the test
    cases whose environments the pytorch role bakes; a flavour without that role carries no such tag."""
    proc = build(
        moto_ec2,
        "slurm-gpu",
        "ami.amazon-ebs.ubuntu2204-x86_64",
        "-on-error=abort",
        "-var",
        'pytorch_testcases=["pytorch/fsdp", "pytorch/ddp"]',
        "-var",
        f"output_dir={tmp_path / 'slurm'}",
    )
    assert "Launching a source AWS instance" in proc.stdout, proc.stdout[-3000:]
    proc = build(
        moto_ec2,
        "eks-gpu",
        "ami.amazon-ebs.eks-al2023-x86_64",
        "-on-error=abort",
        "-var",
        f"output_dir={tmp_path / 'eks'}",
    )
    assert "Launching a source AWS instance" in proc.stdout, proc.stdout[-3000:]
    ec2 = boto3.client("ec2", endpoint_url=moto_ec2)
    tags = {
        instance["ImageId"]: {t["Key"]: t["Value"] for t in instance["Tags"]}
        for reservation in ec2.describe_instances()["Reservations"]
        for instance in reservation["Instances"]
    }
    assert tags["ami-0standin2204x8601"]["trainstack:pytorch_testcases"] == "pytorch/fsdp,pytorch/ddp"
    assert "trainstack:pytorch_testcases" not in tags["ami-0standineksx8601"]


def test_eks_gpu_flavour_finds_its_eks_base_images_and_only_it_starts(moto_ec2, aws_env, tmp_path):
    """`-only 'ami.*' -var flavour=eks-gpu` (make image-ami IMAGE_FLAVOUR=eks-gpu) starts the two EKS sources
    only; each finds its stand-in EKS-optimized accelerated AL2023 AMI (by Amazon EKS's owner and the name of
    the stack's Kubernetes release) and waits for SSH."""
    proc = build(moto_ec2, "eks-gpu", "ami.*", "-var", f"output_dir={tmp_path}")
    started = set(re.findall(r"^(?:==>|-->) ([\w.-]+\.amazon-ebs\.[\w.-]+):", proc.stdout, flags=re.M))
    assert started == {"ami.amazon-ebs.eks-al2023-x86_64", "ami.amazon-ebs.eks-al2023-arm64"}
    assert "No AMI was found matching filters" not in proc.stdout, proc.stdout[-3000:]
    assert "Found Image ID: ami-0standineksx8601" in proc.stdout
    assert "Found Image ID: ami-0standineksa6401" in proc.stdout
    assert proc.stdout.count("Waiting for SSH to become available") == 2
    ec2 = boto3.client("ec2", endpoint_url=moto_ec2)
    images = {
        instance["ImageId"]
        for reservation in ec2.describe_instances()["Reservations"]
        for instance in reservation["Instances"]
    }
    assert images == {"ami-0standineksx8601", "ami-0standineksa6401"}


def test_pcs_and_batch_flavours_find_their_base_images_and_reach_the_ssh_wait(moto_ec2, aws_env, tmp_path):
    """The pcs-gpu flavour starts from stock Ubuntu (and AL2023), batch-gpu from AL2023 only (Batch's
    ECS_AL2023_NVIDIA): one source of each finds its stand-in base AMI, launches and waits for SSH."""
    for flavour, source, ami in [
        ("pcs-gpu", "ubuntu2204-x86_64", "ami-0standin2204x8601"),
        ("batch-gpu", "al2023-arm64", "ami-0standinal2023a01"),
    ]:
        only = f"ami.amazon-ebs.{source}"
        proc = build(moto_ec2, flavour, only, "-var", f"output_dir={tmp_path / flavour}")
        started = set(re.findall(r"^(?:==>|-->) ([\w.-]+\.amazon-ebs\.[\w.-]+):", proc.stdout, flags=re.M))
        assert started == {only}, proc.stdout[-3000:]
        assert f"Found Image ID: {ami}" in proc.stdout
        assert proc.stdout.count("Waiting for SSH to become available") == 1
    ec2 = boto3.client("ec2", endpoint_url=moto_ec2)
    images = {
        instance["ImageId"]
        for reservation in ec2.describe_instances()["Reservations"]
        for instance in reservation["Instances"]
    }
    assert images == {"ami-0standin2204x8601", "ami-0standinal2023a01"}
