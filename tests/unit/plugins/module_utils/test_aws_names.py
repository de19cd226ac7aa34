"""S3 bucket names checked offline, each of S3's naming rules once refused and the valid forms accepted."""

from __future__ import annotations

import pytest
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.names import s3_bucket_problem


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("ab", "3-63 characters"),
        ("a" * 64, "3-63 characters"),
        ("Data", "3-63 characters"),
        ("data_set", "3-63 characters"),
        ("-data", "3-63 characters"),
        ("data.", "3-63 characters"),
        (None, "3-63 characters"),
        ("data..set", "no '..'"),
        ("data.-set", "'.-'"),
        ("data-.set", "'-.'"),
        ("192.168.5.4", "IP address"),
        ("xn--data", "reserved by S3"),
        ("sthree-data", "reserved by S3"),
        ("amzn-s3-demo-data", "reserved by S3"),
        ("data-s3alias", "reserved by S3"),
        ("data--ol-s3", "reserved by S3"),
        ("data.mrap", "reserved by S3"),
        ("data--x-s3", "reserved by S3"),
        ("data--table-s3", "reserved by S3"),
    ],
)
def test_a_name_s3_refuses_is_refused_naming_the_key_and_the_rule(name: object, rule: str) -> None:
    problem = s3_bucket_problem(name, "aws_foundation_bucket_name")
    assert problem.startswith(f"aws_foundation_bucket_name: '{name}'") and rule in problem


@pytest.mark.parametrize("name", ["abc", "my-data.set-2", "a" * 63, "1data", "dataxn--x", "s3alias-data"])
def test_a_valid_name_has_no_problem(name: str) -> None:
    assert s3_bucket_problem(name, "k") == ""
