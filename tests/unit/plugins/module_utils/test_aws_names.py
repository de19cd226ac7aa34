"""Names checked offline (module_utils/aws/names.py): each of S3's naming rules once refused and the valid
forms accepted; the foundation's cluster name and the region, one rule each for the role (through its
filters) and the cluster spec (through target_limits)."""

from __future__ import annotations

import pytest
from ansible_collections.trainstack.cluster.plugins.filter import aws as aws_filters
from ansible_collections.trainstack.cluster.plugins.module_utils.aws import names
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.names import s3_bucket_problem
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import target_limits


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


# ---------------------------------------------------------------- the foundation's name and the region


@pytest.mark.parametrize("name", ["Demo", "my_cluster", "a" * 33, "demo-", "1demo", "d", None, 7])
def test_a_cluster_name_the_foundation_refuses_is_refused_naming_the_key(name: object) -> None:
    problem = names.foundation_name_problem(name, "aws_foundation_cluster_name")
    assert problem.startswith(f"aws_foundation_cluster_name: '{name}' must be 2-32 characters")


@pytest.mark.parametrize("name", ["ab", "llm-a", "a" * 32, "train-p5-2"])
def test_a_cluster_name_the_foundation_takes_has_no_problem(name: str) -> None:
    assert names.foundation_name_problem(name, "k") == ""


def test_the_spec_and_the_foundation_hold_the_name_to_one_rule() -> None:
    """The spec's row of target_limits is the rule of names.py, not a copy of it."""
    row = next(r for r in target_limits.RULES if r.target == target_limits.FOUNDATION)
    assert row.pattern is names.FOUNDATION_NAME
    assert not hasattr(target_limits, "known_regions")


@pytest.mark.parametrize(
    ("region", "expected"),
    [
        (
            "us-eats-1",
            "aws_foundation_region: us-eats-1 is not an AWS region (botocore's endpoint partitions); "
            "did you mean us-east-1?",
        ),
        ("eu-west-9", "aws_foundation_region: eu-west-9 is not an AWS region"),
        ("useast1", "aws_foundation_region: useast1 is not an AWS region"),
        ("", "aws_foundation_region:  is not an AWS region"),
        (None, "aws_foundation_region: None is not an AWS region"),
    ],
)
def test_a_region_botocore_does_not_know_is_refused_offline(region: object, expected: str) -> None:
    assert names.region_problem(region, "aws_foundation_region").startswith(expected)


@pytest.mark.parametrize("region", ["us-east-1", "eu-central-2", "us-gov-west-1", "cn-north-1", "ap-south-2"])
def test_the_regions_of_every_partition_pass(region: str) -> None:
    assert names.region_problem(region, "k") == ""


def test_the_spec_s_region_is_refused_by_the_same_rule() -> None:
    assert target_limits.region_problems({"region": "us-eats-1"}) == [
        names.region_problem("us-eats-1", "region")
    ]


# ---------------------------------------------------------------- through the filters the role calls


def test_the_filters_hand_the_role_s_variable_to_the_rules() -> None:
    filters = aws_filters.FilterModule().filters()
    assert filters["foundation_name_problem"]("Demo", "aws_foundation_cluster_name").startswith(
        "aws_foundation_cluster_name: 'Demo'"
    )
    assert "did you mean us-west-2?" in filters["aws_region_problem"]("us-wset-2", "aws_foundation_region")
    assert filters["aws_region_problem"]("us-west-2", "aws_foundation_region") == ""
