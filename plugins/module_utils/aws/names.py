# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Names AWS accepts, checked offline so that a bad one is refused before the first resource is created.

S3 refuses a bad bucket name only when the bucket is created, which in the foundation comes after the VPC,
subnets and gateways: checking it here, with every rule of S3's naming page (general purpose buckets), is
what lets the foundation refuse it while nothing exists yet. The foundation's cluster name (it names the
bucket, the IAM roles and every tag) and the region are held here too, once: the aws_foundation role asks
through the filters of plugins/filter/aws.py, the cluster spec through cluster/target_limits.py, so the two
cannot drift apart. The region is checked against botocore's endpoint data (endpoints.json), offline, so a
typo is refused before the first AWS call instead of failing it with a connection error to a host that does
not exist. A base-layer module: the standard library, and botocore's data files where botocore is installed.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable

S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
IPV4_LIKE = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
# Prefixes and suffixes S3 keeps for its own features (IDN, access point aliases, Object Lambda, directory and
# table buckets, multi-Region access points, the documentation's examples).
S3_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
S3_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def s3_bucket_problem(name: object, key: str) -> str:
    """Why S3 would refuse this bucket name, as '<key>: ...' ('' when it would accept it)."""
    if not isinstance(name, str) or not S3_BUCKET.match(name):
        rule = "3-63 characters of a-z, 0-9, '.' and '-', starting and ending with a letter or digit"
    elif ".." in name or ".-" in name or "-." in name:
        rule = "no '..', '.-' or '-.' (a dot must sit between two labels)"
    elif IPV4_LIKE.match(name):
        rule = "not formatted as an IP address"
    elif name.startswith(S3_RESERVED_PREFIXES):
        rule = f"not starting with {', '.join(S3_RESERVED_PREFIXES)} (reserved by S3)"
    elif name.endswith(S3_RESERVED_SUFFIXES):
        rule = f"not ending with {', '.join(S3_RESERVED_SUFFIXES)} (reserved by S3)"
    else:
        return ""
    return f"{key}: '{name}' is not a valid S3 bucket name ({rule})."


# The foundation's cluster name: 2-32 characters of a-z, 0-9 and '-', a letter first and no '-' last. It names
# the bucket (with a suffix, within S3's 63), the IAM roles (64) and the trainstack:cluster tag of everything.
FOUNDATION_NAME = r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$"
FOUNDATION_NAME_RULE = "2-32 characters of a-z, 0-9 and '-', starting with a letter and not ending with '-'"


def foundation_name_problem(name: object, key: str) -> str:
    """Why the foundation refuses this cluster name, as '<key>: ...' ('' when it takes it)."""
    if isinstance(name, str) and re.match(FOUNDATION_NAME, name):
        return ""
    return (
        f"{key}: '{name}' must be {FOUNDATION_NAME_RULE} (it names the bucket, the IAM roles and every tag)."
    )


@functools.cache
def known_regions() -> frozenset[str]:
    """Every region of botocore's endpoint partitions (aws, aws-cn, aws-us-gov, the ISO ones); empty when
    botocore is not installed (the region check is then left to AWS)."""
    try:
        from botocore.loaders import create_loader
    except ImportError:  # pragma: no cover - botocore comes with the collection's requirements
        return frozenset()
    partitions = create_loader().load_data("endpoints")["partitions"]
    return frozenset(region for partition in partitions for region in partition["regions"])


def did_you_mean(value: str, known: Iterable[str]) -> str:
    """'; did you mean X?' for the closest known name, or nothing."""
    close = difflib.get_close_matches(value, sorted(known), n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""


def region_problem(region: object, key: str) -> str:
    """Why this is not an AWS region, as '<key>: ...' ('' when botocore's endpoint partitions name it, or
    when botocore's data cannot be read)."""
    regions = known_regions()
    if not regions or (isinstance(region, str) and region in regions):
        return ""
    hint = did_you_mean(region, regions) if isinstance(region, str) else ""
    return f"{key}: {region} is not an AWS region (botocore's endpoint partitions){hint}"
