#!/usr/bin/env python3
"""Require IMDSv2 (session tokens) on the running Packer build instance, before anything is provisioned on it.

Why a provisioner: Packer 1.6.6's amazon-ebs rejects `metadata_options` (current Packer's way to launch with
http_tokens=required), so the build's first provisioner changes the instance's metadata options by its id
(Packer's `build.ID`). From then on nothing on the instance, Ansible and the roles included, can read instance
credentials with a bare IMDSv1 GET. The finished AMI is marked IMDSv2-only separately (ami_finalize.py).
"""

from __future__ import annotations

import argparse
import os
import re
import sys

INSTANCE_ID = re.compile(r"^i-[0-9a-f]{8,17}$")


def check_instance_id(value: str) -> str:
    """An EC2 instance id; anything else (Packer's ERR_ID_NOT_IMPLEMENTED_BY_BUILDER, say) stops the build."""
    if not INSTANCE_ID.match(value):
        raise ValueError(f"--instance-id {value!r} is not an EC2 instance id (i-0123456789abcdef0)")
    return value


def metadata_options(hop_limit: int) -> dict[str, object]:
    """The ModifyInstanceMetadataOptions arguments: endpoint on, tokens required, the given hop limit."""
    if not 1 <= hop_limit <= 64:
        raise ValueError(f"--hop-limit {hop_limit} must be 1-64")
    return {"HttpTokens": "required", "HttpEndpoint": "enabled", "HttpPutResponseHopLimit": hop_limit}


def require_tokens(
    instance_id: str, options: dict[str, object], region: str | None, endpoint: str | None
) -> None:
    """Apply the options; boto3 is imported here so that the checks above stay testable without it."""
    import boto3

    client = boto3.client("ec2", region_name=region or None, endpoint_url=endpoint or None)
    client.modify_instance_metadata_options(InstanceId=instance_id, **options)
    print(f"instance_imdsv2: {instance_id} HttpTokens=required")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--instance-id", required=True)
    parser.add_argument("--hop-limit", type=int, default=1, help="PUT response hop limit (2 for containers)")
    args = parser.parse_args(argv)
    try:
        instance_id = check_instance_id(args.instance_id)
        options = metadata_options(args.hop_limit)
    except ValueError as error:
        parser.error(str(error))
    require_tokens(instance_id, options, os.environ.get("AWS_REGION"), os.environ.get("EC2_ENDPOINT_URL"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
