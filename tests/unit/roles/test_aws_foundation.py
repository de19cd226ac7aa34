"""roles/aws_foundation: the inputs it refuses before any AWS call (its tasks/validate.yml evaluated in
process with Ansible's templar, as a play would), and the placement group requests it makes, checked against
botocore's model of the EC2 API (moto has no placement groups)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from botocore.session import Session
from botocore.validate import ParamValidator

from tests.support import REPO, case_params, role_data_templar, role_task, trust_role_data

ROLE = "aws_foundation"
GOOD = {
    "aws_foundation_cluster_name": "llm-a",
    "aws_foundation_region": "us-east-1",
    "aws_foundation_availability_zone": "us-east-1a",
}
AWS_CALL = "amazon.aws."


def _evaluate(templar: Any, tasks: list[dict]) -> tuple[str | None, Any]:
    """Run the controller-side steps of a task list: set_fact, blocks (when, vars) and asserts (loops).

    Returns the first failing assert's message (or None) and the templar with the facts set so far. It stops
    at the first AWS call: that part is the integration test's (tests/integration/aws)."""
    from ansible.template import trust_as_template

    for task in tasks:
        scoped = templar.copy_with_new_env(
            available_variables={**templar.available_variables, **trust_role_data(task.get("vars") or {})}
        )
        if any(key.startswith(AWS_CALL) for key in task):
            return None, templar
        condition = task.get("when")
        if condition is not None and not scoped.evaluate_conditional(trust_as_template(str(condition))):
            continue
        if "block" in task:
            message = _evaluate(scoped, task["block"])[0]
            if message is not None:
                return message, templar
        elif "ansible.builtin.set_fact" in task:
            facts = {
                k: scoped.template(trust_as_template(v)) for k, v in task["ansible.builtin.set_fact"].items()
            }
            templar = templar.copy_with_new_env(available_variables={**templar.available_variables, **facts})
        elif "ansible.builtin.assert" in task:
            message = _assert(scoped, task)
            if message is not None:
                return message, templar
    return None, templar


def _assert(templar: Any, task: dict) -> str | None:
    from ansible.template import trust_as_template

    spec = task["ansible.builtin.assert"]
    conditions = spec["that"] if isinstance(spec["that"], list) else [spec["that"]]
    items = templar.template(trust_as_template(task["loop"])) if "loop" in task else [None]
    for item in items:
        one = templar.copy_with_new_env(available_variables={**templar.available_variables, "item": item})
        if not all(one.evaluate_conditional(trust_as_template(str(c))) for c in conditions):
            return str(one.template(trust_as_template(spec["fail_msg"])))
    return None


def refusal(variables: dict[str, Any]) -> str | None:
    """The message the role stops with for these variables (GOOD underneath), or None."""
    templar = role_data_templar(ROLE, **{**GOOD, **variables})
    tasks = yaml.safe_load((REPO / "roles" / ROLE / "tasks" / "validate.yml").read_text())
    return _evaluate(templar, tasks)[0]


FSX = {"aws_foundation_fsx_enabled": True}
EKS = {"aws_foundation_orchestrator": "eks"}
# (case id, variables, fragment the message must contain: the variable it names)
BAD_INPUT = [
    ("name_upper", {"aws_foundation_cluster_name": "LLM"}, "aws_foundation_cluster_name"),
    ("name_trailing_dash", {"aws_foundation_cluster_name": "llm-"}, "aws_foundation_cluster_name"),
    ("name_too_long", {"aws_foundation_cluster_name": "a" * 33}, "aws_foundation_cluster_name"),
    ("region", {"aws_foundation_region": "us-east"}, "aws_foundation_region"),
    # Shaped like a region, its zone consistent with it: botocore's endpoint data tells the typo, offline.
    (
        "region_typo",
        {"aws_foundation_region": "us-eats-1", "aws_foundation_availability_zone": "us-eats-1a"},
        "aws_foundation_region: us-eats-1 is not an AWS region (botocore's endpoint partitions); "
        "did you mean us-east-1?",
    ),
    (
        "zone_other_region",
        {"aws_foundation_availability_zone": "us-west-2a"},
        "aws_foundation_availability_zone",
    ),
    ("vpc_not_cidr", {"aws_foundation_vpc_cidr": "10.0.0.0"}, "aws_foundation_vpc_cidr"),
    ("vpc_octet", {"aws_foundation_vpc_cidr": "10.0.300.0/16"}, "aws_foundation_vpc_cidr"),
    ("vpc_host_bits", {"aws_foundation_vpc_cidr": "10.0.0.1/16"}, "aws_foundation_vpc_cidr"),
    ("vpc_too_big", {"aws_foundation_vpc_cidr": "10.0.0.0/8"}, "aws_foundation_vpc_cidr"),
    (
        "subnet_outside",
        {"aws_foundation_public_subnet_cidr": "10.1.0.0/24"},
        "aws_foundation_public_subnet_cidr",
    ),
    (
        "subnets_overlap",
        {"aws_foundation_public_subnet_cidr": "10.0.128.0/24"},
        "aws_foundation_public_subnet_cidr/aws_foundation_private_subnet_cidr",
    ),
    ("ssh_cidr", {"aws_foundation_ssh_cidrs": ["203.0.113.7"]}, "aws_foundation_ssh_cidrs"),
    ("egress_cidr", {"aws_foundation_egress_cidrs": ["0.0.0.0/33"]}, "aws_foundation_egress_cidrs"),
    ("given_no_subnet", {"aws_foundation_vpc_create": False}, "aws_foundation_private_subnet_id"),
    ("bucket_name", {"aws_foundation_bucket_name": "Data_Bucket"}, "aws_foundation_bucket_name"),
    ("fsx_size", {**FSX, "aws_foundation_fsx_storage_capacity": 3000}, "aws_foundation_fsx_storage_capacity"),
    (
        "fsx_size_zero",
        {**FSX, "aws_foundation_fsx_storage_capacity": 0},
        "aws_foundation_fsx_storage_capacity",
    ),
    (
        "fsx_type",
        {**FSX, "aws_foundation_fsx_deployment_type": "PERSISTENT_3"},
        "aws_foundation_fsx_deployment_type",
    ),
    (
        "fsx_throughput",
        {**FSX, "aws_foundation_fsx_per_unit_storage_throughput": 200},
        "aws_foundation_fsx_per_unit_storage_throughput",
    ),
    (
        "fsx_link_scratch_1",
        {
            **FSX,
            "aws_foundation_fsx_deployment_type": "SCRATCH_1",
            "aws_foundation_fsx_storage_capacity": 3600,
        },
        "aws_foundation_fsx_link_bucket",
    ),
    (
        "fsx_link_path",
        {**FSX, "aws_foundation_fsx_file_system_path": "data"},
        "aws_foundation_fsx_link_bucket",
    ),
    ("orchestrator", {"aws_foundation_orchestrator": "kubernetes"}, "aws_foundation_orchestrator"),
    (
        "eks_second_subnet_overlaps",
        {**EKS, "aws_foundation_second_private_subnet_cidr": "10.0.128.0/18"},
        "aws_foundation_private_subnet_cidr/aws_foundation_second_private_subnet_cidr",
    ),
    (
        "eks_second_subnet_outside",
        {**EKS, "aws_foundation_second_private_subnet_cidr": "10.1.64.0/18"},
        "aws_foundation_second_private_subnet_cidr",
    ),
    (
        "eks_second_zone_is_the_first",
        {**EKS, "aws_foundation_second_availability_zone": "us-east-1a"},
        "aws_foundation_second_availability_zone",
    ),
    (
        "eks_second_zone_other_region",
        {**EKS, "aws_foundation_second_availability_zone": "us-west-2b"},
        "aws_foundation_second_availability_zone",
    ),
    (
        "hyperpod_lifecycle_bucket",
        {
            "aws_foundation_orchestrator": "hyperpod",
            "aws_foundation_hyperpod_lifecycle_bucket": "Lifecycle_Scripts",
        },
        "aws_foundation_hyperpod_lifecycle_bucket",
    ),
]
# (case id, variables)
GOOD_INPUT = [
    ("eks", EKS),
    (
        "eks_given_subnets_need_no_second",
        {
            **EKS,
            "aws_foundation_vpc_create": False,
            "aws_foundation_private_subnet_id": "subnet-0a1b2c3d",
            "aws_foundation_second_private_subnet_cidr": "10.0.128.0/18",
        },
    ),
    ("hyperpod", {"aws_foundation_orchestrator": "hyperpod"}),
    # Only EKS has a second subnet: another orchestrator does not check its CIDR.
    (
        "pcs_ignores_second_subnet",
        {"aws_foundation_orchestrator": "pcs", "aws_foundation_second_private_subnet_cidr": "10.0.128.0/18"},
    ),
    ("defaults", {}),
    ("local_zone", {"aws_foundation_availability_zone": "us-east-1-bos-1a"}),
    (
        "ssh_and_no_egress",
        {"aws_foundation_ssh_cidrs": ["203.0.113.0/24"], "aws_foundation_egress_cidrs": []},
    ),
    (
        "given_subnet",
        {"aws_foundation_vpc_create": False, "aws_foundation_private_subnet_id": "subnet-0a1b2c3d"},
    ),
    ("fsx_persistent_2", {**FSX, "aws_foundation_fsx_storage_capacity": 4800}),
    (
        "fsx_scratch_2_ignores_throughput",
        {
            **FSX,
            "aws_foundation_fsx_deployment_type": "SCRATCH_2",
            "aws_foundation_fsx_storage_capacity": 2400,
        },
    ),
    (
        "fsx_scratch_1_unlinked",
        {
            **FSX,
            "aws_foundation_fsx_deployment_type": "SCRATCH_1",
            "aws_foundation_fsx_storage_capacity": 7200,
            "aws_foundation_fsx_link_bucket": False,
        },
    ),
    (
        "fsx_persistent_1",
        {
            **FSX,
            "aws_foundation_fsx_deployment_type": "PERSISTENT_1",
            "aws_foundation_fsx_per_unit_storage_throughput": 200,
        },
    ),
]


@pytest.mark.parametrize(("variables", "fragment"), case_params(BAD_INPUT))
def test_bad_input_is_refused_naming_the_variable(variables: dict, fragment: str) -> None:
    message = refusal(variables)
    assert message is not None and fragment in message, message


@pytest.mark.parametrize("variables", case_params(GOOD_INPUT))
def test_good_input_passes(variables: dict) -> None:
    assert refusal(variables) is None


# ------------------------------------------------------------ placement group requests vs botocore's model
EC2 = Session().get_service_model("ec2")


def api_errors(operation: str, request: dict[str, Any]) -> str:
    """What botocore's parameter validation says about this request ('' when it is valid)."""
    report = ParamValidator().validate(request, EC2.operation_model(operation).input_shape)
    return report.generate_report() if report.has_errors() else ""


def rendered(tasks_file: str, task_name: str) -> dict[str, Any]:
    """One of the role's task arguments, rendered for the GOOD cluster."""
    from ansible.template import trust_as_template

    task = role_task(ROLE, tasks_file, task_name)
    module = next(key for key in task if key.startswith(AWS_CALL))
    templar = role_data_templar(ROLE, **GOOD)
    return {
        k: templar.template(trust_as_template(v) if isinstance(v, str) else v)
        for k, v in task[module].items()
    }


def test_placement_group_requests_are_valid_ec2_requests() -> None:
    """The create request amazon.aws.ec2_placement_group sends for the role's arguments, and the teardown's
    lookup, are what EC2's API model accepts; the group carries the cluster tag."""
    from ansible_collections.amazon.aws.plugins.module_utils.tagging import boto3_tag_specifications

    made = rendered("placement_group.yml", "Create the cluster placement group")
    create = {
        "GroupName": made["name"],
        "Strategy": made["strategy"],
        "TagSpecifications": boto3_tag_specifications(made["tags"], ["placement-group"]),
    }
    assert api_errors("CreatePlacementGroup", create) == ""
    assert made["name"] == "llm-a-cluster" and made["tags"]["trainstack:cluster"] == "llm-a"
    teardown = yaml.safe_load((REPO / "roles" / ROLE / "tasks" / "teardown.yml").read_text())
    steps = {t["name"]: t for t in teardown[1]["block"]}
    find = steps["Find the placement group"]["amazon.aws.ec2_placement_group_info"]
    templar = role_data_templar(ROLE, **GOOD)
    names = [templar.template(trust_role_data(n)) for n in find["names"]]
    lookup = {"Filters": [{"Name": "group-name", "Values": names}]}
    assert api_errors("DescribePlacementGroups", lookup) == ""
    assert api_errors("DeletePlacementGroup", {"GroupName": names[0]}) == ""
    # The check itself: a request EC2 refuses is reported.
    assert "Strategy" in api_errors("CreatePlacementGroup", {**create, "Strategy": 7})
