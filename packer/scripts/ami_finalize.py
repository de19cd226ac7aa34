#!/usr/bin/env python3
"""Mark the AMIs of the last Packer run IMDSv2-only (ImdsSupport=v2.0), in every region they were copied to.

Why a post-processor: Packer 1.6.6's amazon-ebs has no `imds_support`/`metadata_options`, and the AMI
attribute is what makes every instance launched from the image default to IMDSv2 with tokens required,
whoever launches it. Reads Packer's manifest (artifact_id "region:ami-id,region:ami-id") for the last build.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def last_build_amis(manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """(region, ami) pairs of the most recent build recorded in a Packer manifest."""
    run = manifest.get("last_run_uuid")
    builds = [b for b in manifest.get("builds", []) if b.get("packer_run_uuid") == run] or manifest.get(
        "builds", []
    )
    if not builds:
        raise ValueError("manifest has no builds")
    pairs = []
    for item in str(builds[-1].get("artifact_id", "")).split(","):
        region, _, ami = item.partition(":")
        if not ami.startswith("ami-"):
            raise ValueError(f"artifact_id entry {item!r} is not region:ami-id")
        pairs.append((region, ami))
    return pairs


def require_imdsv2(pairs: list[tuple[str, str]], value: str, endpoint: str | None) -> None:
    """Set ImdsSupport on each AMI; boto3 is imported here so the parser above stays testable without it."""
    import boto3

    for region, ami in pairs:
        client = boto3.client("ec2", region_name=region, endpoint_url=endpoint or None)
        client.modify_image_attribute(ImageId=ami, ImdsSupport={"Value": value})
        print(f"ami_finalize: {region} {ami} ImdsSupport={value}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--imds-support", default="v2.0")
    args = parser.parse_args(argv)
    with open(args.manifest, encoding="utf-8") as handle:
        pairs = last_build_amis(json.load(handle))
    require_imdsv2(pairs, args.imds_support, os.environ.get("EC2_ENDPOINT_URL"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
