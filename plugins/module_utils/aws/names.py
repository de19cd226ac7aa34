# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Names AWS accepts, checked offline so that a bad one is refused before the first resource is created.

S3 refuses a bad bucket name only when the bucket is created, which in the foundation comes after the VPC,
subnets and gateways: checking it here, with every rule of S3's naming page (general purpose buckets), is
what lets the foundation refuse it while nothing exists yet. A base-layer module: standard library only.
"""

from __future__ import annotations

import re

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
