"""The AMI build's security settings as EC2 receives them, against moto's EC2 server (no AWS).

A real `packer build` (kept with -on-error=abort) shows the temporary security group admitting SSH from
ssh_source_cidrs only and the build volume encrypted with kms_key_id; the build-instance IMDSv2 step
(packer/scripts/instance_imdsv2.py, which Packer runs after the SSH wait that moto never passes) is run
directly against an instance launched in moto, as Packer would run it with the instance's id.
"""

from __future__ import annotations

import os
import subprocess
import sys

import boto3
import pytest

from tests.support import REPO, VENV_BIN

from .conftest import closed_port, packer

pytestmark = pytest.mark.moto
KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def test_build_admits_ssh_from_the_given_cidrs_and_encrypts_with_the_key(moto_ec2, aws_env, tmp_path):
    port = closed_port()
    proc = packer(
        "build",
        "-color=false",
        "-on-error=abort",
        "-only=ami.amazon-ebs.ubuntu2204-x86_64",
        "-var",
        "flavour=base-gpu",
        "-var",
        f"custom_endpoint_ec2={moto_ec2}",
        "-var",
        "skip_credential_validation=true",
        "-var",
        "ssh_host=127.0.0.1",
        "-var",
        f"ssh_port={port}",
        "-var",
        "ssh_timeout=3s",
        "-var",
        f"ansible_playbook={VENV_BIN / 'ansible-playbook'}",
        "-var",
        f"output_dir={tmp_path}",
        "-var",
        f"kms_key_id={KEY}",
        "packer",
    )
    assert "Creating temporary security group" in proc.stdout, proc.stdout[-3000:]
    ec2 = boto3.client("ec2", endpoint_url=moto_ec2)
    (group,) = [g for g in ec2.describe_security_groups()["SecurityGroups"] if g["GroupName"] != "default"]
    (rule,) = group["IpPermissions"]
    assert (rule["FromPort"], rule["ToPort"]) == (port, port), "the SSH port only"
    assert sorted(r["CidrIp"] for r in rule["IpRanges"]) == ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]
    (reservation,) = ec2.describe_instances()["Reservations"]
    (instance,) = reservation["Instances"]
    (volume,) = ec2.describe_volumes(
        Filters=[{"Name": "attachment.instance-id", "Values": [instance["InstanceId"]]}]
    )["Volumes"]
    assert volume["Encrypted"] is True and volume["KmsKeyId"] == KEY


def test_imdsv2_step_requires_tokens_on_the_build_instance(moto_ec2, aws_env):
    ec2 = boto3.client("ec2", endpoint_url=moto_ec2)
    (instance,) = ec2.run_instances(ImageId="ami-0standin2204x8601", MinCount=1, MaxCount=1)["Instances"]
    instance_id = instance["InstanceId"]
    before = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    assert before["MetadataOptions"]["HttpTokens"] == "optional"
    env = {**os.environ, "EC2_ENDPOINT_URL": moto_ec2, "AWS_REGION": "us-east-1"}
    script = REPO / "packer" / "scripts" / "instance_imdsv2.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--instance-id", instance_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    after = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    assert after["MetadataOptions"]["HttpTokens"] == "required"
    assert after["MetadataOptions"]["HttpEndpoint"] == "enabled"
