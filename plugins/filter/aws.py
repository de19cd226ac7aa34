# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Filters of the AWS base layer (module_utils/aws), for checks a role makes before it creates anything.

The rules live in module_utils/aws/names.py, where the cluster spec's checks read them too; a filter only
hands the role's variable to them, so the role and the spec cannot hold two versions of one rule.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.aws import names


def s3_bucket_problem(name: Any, key: str) -> str:
    """Why S3 would refuse the bucket name, naming the variable ('' when it is valid)."""
    return names.s3_bucket_problem(name, str(key))


def foundation_name_problem(name: Any, key: str) -> str:
    """Why the foundation refuses the cluster name, naming the variable ('' when it takes it)."""
    return names.foundation_name_problem(name, str(key))


def aws_region_problem(region: Any, key: str) -> str:
    """Why the region is not an AWS region (botocore's endpoint data, offline), naming the variable."""
    return names.region_problem(region, str(key))


class FilterModule:
    """trainstack.cluster AWS filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "s3_bucket_problem": s3_bucket_problem,
            "foundation_name_problem": foundation_name_problem,
            "aws_region_problem": aws_region_problem,
        }
