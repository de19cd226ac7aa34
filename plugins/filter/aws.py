# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Filters of the AWS base layer (module_utils/aws), for checks a role makes before it creates anything."""

from __future__ import annotations

from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.aws import names


def s3_bucket_problem(name: Any, key: str) -> str:
    """Why S3 would refuse the bucket name, naming the variable ('' when it is valid)."""
    return names.s3_bucket_problem(name, str(key))


class FilterModule:
    """trainstack.cluster AWS filters."""

    def filters(self) -> dict[str, Any]:
        return {"s3_bucket_problem": s3_bucket_problem}
