"""module_utils/cluster/pcs_render.py: each example cluster spec's AWS PCS requests, held to the model.

moto has no PCS backend, so nothing here (or anywhere in the tests) reaches a PCS API: every rendered request
is validated against botocore's own model of the PCS API (service-2.json, 2023-02-10), first by botocore's
ParamValidator (required members, types, minimums) and then by the renderer's walk over the same shapes
(enums, patterns, maximums, which ParamValidator leaves to the service). What PCS itself would refuse beyond
its model (an instance profile whose role is not named for PCS, a launch template without the EFA interfaces)
is not seen here.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import cluster_spec, pcs_render
from botocore.session import Session

from tests.unit.plugins.cluster_examples import AMI, EXAMPLE_SPECS
from tests.unit.plugins.cluster_examples import FOUNDATION as SHARED_FOUNDATION

pytestmark = pytest.mark.cluster

PCS = Session().get_service_model("pcs")
EXAMPLES = EXAMPLE_SPECS
FOUNDATION = {
    **SHARED_FOUNDATION,
    "instance_profile": "arn:aws:iam::123456789012:instance-profile/aws-pcs/trainstack-node",
}
SHARED_TEMPLATE = {"id": "lt-0123456789abcdef0", "version": "1"}


def own_templates(spec: dict[str, Any]) -> dict[str, Any]:
    """A launch template of its own for each queue that needs one (EFA, placement group, reservation)."""
    return {
        queue["name"]: {"id": f"lt-{index:017x}", "version": "2"}
        for index, queue in enumerate(spec["queues"], start=1)
        if pcs_render._launch_template_settings(queue)
    }


def example(example_name: str, **changes: Any) -> dict[str, Any]:
    raw = yaml.safe_load(EXAMPLES[example_name].read_text())
    raw.update(changes)
    return cluster_spec.normalise(raw, example_name)


def rendered(name: str, **changes: Any) -> dict[str, Any]:
    spec = example(name, **changes)
    return pcs_render.render(spec, FOUNDATION, AMI, SHARED_TEMPLATE, own_templates(spec))


def refusal(spec: dict[str, Any], **kwargs: Any) -> list[str]:
    args = {"foundation": FOUNDATION, "ami_id": AMI, "launch_template": SHARED_TEMPLATE, **kwargs}
    with pytest.raises(pcs_render.PcsRenderError) as caught:
        pcs_render.render(
            spec, args["foundation"], args["ami_id"], args["launch_template"], args.get("launch_templates")
        )
    return caught.value.problems


# ---------------------------------------------------------------- the constants are the model's


def test_slurm_versions_are_the_ones_the_model_documents() -> None:
    version = PCS.operation_model("CreateCluster").input_shape.members["scheduler"].members["version"]
    documented = re.search(r"Valid Values:\s*([0-9. |]+)", re.sub("<[^>]+>", "", version.documentation))
    assert documented, version.documentation
    assert (
        tuple(v.strip() for v in documented.group(1).split("|") if v.strip()) == pcs_render.PCS_SLURM_VERSIONS
    )


def test_sizes_and_purchase_options_are_enums_of_the_model() -> None:
    assert [entry[0] for entry in pcs_render.PCS_SIZES] == PCS.shape_for("Size").enum
    assert set(pcs_render.PURCHASE_OPTION.values()) <= set(PCS.shape_for("PurchaseOption").enum)


# ---------------------------------------------------------------- every example passes the model


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_requests_pass_botocores_pcs_model(name: str) -> None:
    requests = rendered(name)
    pcs_render.validate(requests, PCS)
    operations = [("CreateCluster", requests["cluster"])]
    operations += [("CreateComputeNodeGroup", group) for group in requests["node_groups"]]
    operations += [("CreateQueue", queue) for queue in requests["queues"]]
    for operation, request in operations:
        assert pcs_render.request_problems(operation, request, PCS) == "", (operation, request)
    spec = example(name)
    assert len(requests["queues"]) == len(spec["queues"])
    assert len(requests["node_groups"]) == len(spec["queues"]) + (1 if spec.get("login_nodes") else 0)


def tags(stack: str) -> dict[str, str]:
    """p4d's tags: its name and stack, and where its data (the linked S3 prefix) and checkpoints go."""
    return {
        "trainstack:cluster": "train-p4d",
        "trainstack:stack": stack,
        "trainstack:data-dir": "/fsx/data",
        "trainstack:checkpoint-dir": "/fsx/trainstack/checkpoints",
    }


def test_p4d_cluster_node_group_and_queue(current_stack_id: str) -> None:
    requests = rendered("p4d")
    assert requests["cluster"] == {
        "clusterName": "train-p4d",
        "scheduler": {"type": "SLURM", "version": "25.11"},  # the current stack builds Slurm 25.11.8
        "size": "SMALL",
        "networking": {
            "subnetIds": [FOUNDATION["subnet_private"]],
            "securityGroupIds": [FOUNDATION["security_group"]],
        },
        "tags": tags(current_stack_id),
    }
    (group,) = requests["node_groups"]
    assert group["computeNodeGroupName"] == "a100"
    assert group["amiId"] == AMI
    assert group["instanceConfigs"] == [{"instanceType": "p4d.24xlarge"}]
    assert group["scalingConfiguration"] == {"minInstanceCount": 0, "maxInstanceCount": 4}
    assert group["purchaseOption"] == "ONDEMAND"
    assert group["subnetIds"] == [FOUNDATION["subnet_private"]]
    assert group["iamInstanceProfileArn"] == FOUNDATION["instance_profile"]
    assert group["customLaunchTemplate"] == {"id": "lt-00000000000000001", "version": "2"}
    assert "securityGroupIds" not in group  # its EFA launch template's interfaces carry the group
    (script,) = group["nodeLifecycleActions"]["stages"]["nodeBootstrapped"]
    assert script["scriptSource"] == {
        "scriptLocation": "s3://trainstack-test-cluster/trainstack/bootstrap.sh"
    }
    assert script["arguments"] == [
        "compute",
        "--bundle",
        f"s3://trainstack-test-cluster/trainstack/bundles/{'ab' * 32}.tar.gz",
        "--sha256",
        "ab" * 32,
    ]
    assert requests["queues"] == [
        {
            "clusterIdentifier": "train-p4d",
            "queueName": "a100",
            "computeNodeGroupConfigurations": [{"computeNodeGroupId": "a100"}],
            "tags": tags(current_stack_id),
        }
    ]
    assert any(line.startswith("shared_storage.fsx_lustre:") for line in requests["not_rendered"])


def test_p5_capacity_block_login_nodes_accounting_and_existing_subnets() -> None:
    requests = rendered("p5")
    spec = example("p5")
    assert requests["cluster"]["slurmConfiguration"] == {"accounting": {"mode": "STANDARD"}}
    assert requests["cluster"]["networking"]["subnetIds"] == [spec["network"]["private_subnet_id"]]
    block, debug, login = requests["node_groups"]
    assert (block["purchaseOption"], block["scalingConfiguration"]) == (
        "CAPACITY_BLOCK",
        {"minInstanceCount": 2, "maxInstanceCount": 2},
    )
    assert debug["purchaseOption"] == "ONDEMAND"
    assert login["computeNodeGroupName"] == "login"
    assert login["subnetIds"] == [spec["network"]["public_subnet_id"]]
    assert login["scalingConfiguration"] == {"minInstanceCount": 2, "maxInstanceCount": 2}
    assert login["sshKeyName"] == "training"
    assert login["customLaunchTemplate"] == SHARED_TEMPLATE
    assert login["securityGroupIds"] == [FOUNDATION["security_group"]]
    assert login["nodeLifecycleActions"]["stages"]["nodeBootstrapped"][0]["arguments"][0] == "login"
    assert [q["queueName"] for q in requests["queues"]] == ["h100-block", "h100-debug"]


def test_g6e_spot_and_no_accounting() -> None:
    requests = rendered("g6e")
    assert "slurmConfiguration" not in requests["cluster"]
    group = requests["node_groups"][0]
    assert group["purchaseOption"] == "SPOT"
    assert group["spotOptions"] == {"allocationStrategy": "price-capacity-optimized"}


def test_size_follows_the_node_count() -> None:
    spec = example("p4d")
    spec["queues"][0]["max_count"] = 33
    assert (
        pcs_render.render(spec, FOUNDATION, AMI, SHARED_TEMPLATE, own_templates(spec))["cluster"]["size"]
        == "MEDIUM"
    )


def test_no_bucket_no_lifecycle_action() -> None:
    spec = example("p4d")
    foundation = {k: v for k, v in FOUNDATION.items() if k not in ("bucket", "bundle_sha256")}
    requests = pcs_render.render(spec, foundation, AMI, SHARED_TEMPLATE, own_templates(spec))
    assert "nodeLifecycleActions" not in requests["node_groups"][0]
    pcs_render.validate(requests, PCS)


# ---------------------------------------------------------------- the model's check refuses broken requests


def test_botocore_refuses_a_missing_required_member_and_a_wrong_type() -> None:
    group = copy.deepcopy(rendered("p4d")["node_groups"][0])
    del group["iamInstanceProfileArn"]
    group["scalingConfiguration"]["maxInstanceCount"] = "4"
    report = pcs_render.request_problems("CreateComputeNodeGroup", group, PCS)
    assert 'Missing required parameter in input: "iamInstanceProfileArn"' in report
    assert "Invalid type for parameter scalingConfiguration.maxInstanceCount" in report


def test_the_model_check_refuses_an_enum_a_pattern_and_a_maximum() -> None:
    cluster = copy.deepcopy(rendered("p4d")["cluster"])
    cluster["size"] = "HUGE"
    cluster["clusterName"] = "x" * 41
    report = pcs_render.request_problems("CreateCluster", cluster, PCS)
    assert "size: 'HUGE' is not one of SMALL, MEDIUM, LARGE" in report
    assert "clusterName: 41 characters, at most 40" in report
    group = copy.deepcopy(rendered("p4d")["node_groups"][0])
    group["amiId"] = "image-1"
    assert "amiId: 'image-1' does not match the pattern" in pcs_render.request_problems(
        "CreateComputeNodeGroup", group, PCS
    )


def test_validate_names_the_operation_of_the_refused_request() -> None:
    requests = rendered("p5")
    del requests["queues"][1]["queueName"]
    with pytest.raises(pcs_render.PcsRequestError) as caught:
        pcs_render.validate(requests, PCS)
    assert caught.value.operation == "CreateQueue"
    assert "queueName" in caught.value.report


# ---------------------------------------------------------------- what PCS cannot express is refused


def test_launch_template_only_settings_need_the_queues_own_template() -> None:
    problems = refusal(example("p5"))
    assert any(p.startswith("queues[0].efa: CreateComputeNodeGroup has no field for it") for p in problems)
    assert any(p.startswith("queues[0].placement_group:") for p in problems)
    assert any(
        p.startswith("queues[0].capacity_reservation_id:") and "launch_templates.h100-block" in p
        for p in problems
    )
    assert any(p.startswith("queues[1].efa:") for p in problems)


def test_no_launch_template_at_all_is_refused() -> None:
    spec = example("g6e")
    spec["queues"][0].update(efa=False, placement_group=False)
    problems = refusal(spec, launch_template=None)
    assert any(p.startswith("launch_template: queue 'l40s'") for p in problems)
    assert any(p.startswith("launch_template: the login nodes") for p in problems)


def test_unknown_or_malformed_launch_templates_are_refused() -> None:
    spec = example("p4d")
    problems = refusal(
        spec, launch_templates={"a100": {"id": "template"}, "gpu": {"id": "lt-0123456789abcdef0"}}
    )
    assert "launch_templates.gpu: no queue or login node group of the spec has this name" in problems
    assert (
        "launch_templates.a100.id: must be an EC2 launch template id (lt- and 8 to 17 hex digits)" in problems
    )


def test_a_stack_whose_slurm_pcs_does_not_run_is_refused() -> None:
    problems = refusal(example("p4d", image={"ami_id": AMI, "os": "ubuntu-22.04", "stack": "ts-2025.12"}))
    assert any(
        p.startswith("image.stack: stack ts-2025.12 builds Slurm 24.05") and "24.11, 25.05, 25.11, 26.05" in p
        for p in problems
    )


def test_names_pcs_cannot_take_are_refused() -> None:
    # The spec itself refuses these names (module_utils/cluster/target_limits.py); the renderer refuses them
    # too, for a spec made in code after normalise.
    spec = example("g6e")
    spec["name"] = "t" * 41
    spec["queues"][0]["name"] = "login"
    problems = refusal(spec, launch_templates={"login": SHARED_TEMPLATE})
    assert "name: PCS cluster names are 3 to 40 characters; " + repr("t" * 41) + " has 41" in problems
    assert any(
        p.startswith("queues[0].name: 'login' is the name of the login nodes' node group") for p in problems
    )
    spec = example("g6e")
    spec["queues"][0]["name"] = "gp"
    assert any(
        p.startswith("queues[0].name: PCS queue and node group names are 3 to 25") for p in refusal(spec)
    )


def test_more_nodes_than_the_largest_cluster_is_refused() -> None:
    spec = example("g6e")
    spec["queues"][0]["max_count"] = 2048
    problems = refusal(spec, launch_templates=own_templates(spec))
    assert problems == [
        "queues: the queues' max_count and login_nodes.count add up to 2049 nodes; the largest PCS cluster "
        "(size LARGE) manages 2048"
    ]


def test_missing_foundation_inputs_are_refused() -> None:
    spec = example("p4d")
    foundation = {
        k: v for k, v in FOUNDATION.items() if k not in ("instance_profile", "subnet_private", "bucket")
    }
    problems = refusal(spec, foundation=foundation, launch_templates=own_templates(spec))
    assert any(p.startswith("foundation.instance_profile: is required") for p in problems)
    assert any(p.startswith("foundation.subnet_private: is required: network.vpc is new") for p in problems)
    assert any(p.startswith("foundation.bucket, foundation.bundle_sha256: give both") for p in problems)


def test_a_spec_found_by_tags_needs_the_ami_id() -> None:
    spec = example("p4d")
    problems = refusal(spec, ami_id=None, launch_templates=own_templates(spec))
    assert any(p.startswith("image.tags: the AMI is found by its tags") for p in problems)


def test_the_foundation_record_renders_through_the_pcluster_foundation_filter() -> None:
    """The record cluster_foundation writes serves PCS as it serves ParallelCluster, through one filter."""
    from ansible_collections.trainstack.cluster.plugins.filter.cluster import pcluster_foundation

    spec = example("p4d")
    record = {
        "cluster_name": "train-p4d",
        "region": "us-east-1",
        "public_subnet_id": "subnet-0aaaaaaaaaaaaaaa1",
        "private_subnet_id": "subnet-0bbbbbbbbbbbbbbb2",
        "security_group_id": "sg-0ccccccccccccccc3",
        "bucket": "example-training-data",
        "instance_profile_arn": "arn:aws:iam::123456789012:instance-profile/aws-pcs/train-p4d-node",
        "fsx_file_system_id": "fs-0ddddddddddddddd4",
        "placement_group": "train-p4d-cluster",
    }
    foundation = pcluster_foundation(record, spec, bundle_sha256="cd" * 32)
    requests = pcs_render.render(spec, foundation, AMI, None, own_templates(spec))
    pcs_render.validate(requests, PCS)
    assert requests["cluster"]["networking"] == {
        "subnetIds": [record["private_subnet_id"]],
        "securityGroupIds": [record["security_group_id"]],
    }
    (group,) = requests["node_groups"]
    assert (group["subnetIds"], group["iamInstanceProfileArn"]) == (
        [record["private_subnet_id"]],
        record["instance_profile_arn"],
    )
    assert group["nodeLifecycleActions"]["stages"]["nodeBootstrapped"][0]["scriptSource"] == {
        "scriptLocation": "s3://example-training-data/trainstack/bootstrap.sh"
    }
