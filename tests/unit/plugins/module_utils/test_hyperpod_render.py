"""module_utils/cluster/hyperpod_render.py: a spec's HyperPod request and provisioning_parameters.json.

Every rendered request is held to botocore's own model of the SageMaker API (service-2.json, 2017-07-24)
through module_utils/cluster/botocore_model.py (ParamValidator, then enums, patterns and maxima), and to
HyperPod's rules the model leaves optional (every group has a lifecycle script, whole-name patterns, unique
group names). What HyperPod itself would refuse beyond that (a role SageMaker may not assume, a subnet of
another VPC) is not seen.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import (
    cluster_spec,
    hyperpod_render,
    pcs_render,
)
from botocore.session import Session

from tests.support import REPO
from tests.unit.plugins.cluster_examples import EXAMPLE_SPECS

pytestmark = pytest.mark.cluster

SAGEMAKER = Session().get_service_model("sagemaker")
HYPERPOD_SPEC = REPO / "inventories" / "aws" / "hyperpod" / "train-hp.yml"
FOUNDATION = {
    "subnet_private": "subnet-0b0b0b0b0b0b0b0b0",
    "security_group": "sg-0c0c0c0c0c0c0c0c0",
    "execution_role": "arn:aws:iam::123456789012:role/trainstack-train-hp-hyperpod",
    "lifecycle_s3_uri": "s3://sagemaker-trainstack-train-hp/hyperpod/train-hp",
    "fsx_dns_name": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
    "fsx_mount_name": "abcdefgh",
}


def spec_of(path: Any = HYPERPOD_SPEC, **changes: Any) -> dict[str, Any]:
    raw = yaml.safe_load(path.read_text())
    raw.update(changes)
    return cluster_spec.normalise(raw, path.stem)


def refusal(
    spec: dict[str, Any], foundation: dict[str, Any] | None = None, mode: str = "provisioning_parameters"
):
    with pytest.raises(hyperpod_render.HyperPodRenderError) as caught:
        hyperpod_render.render(spec, FOUNDATION if foundation is None else foundation, mode, SAGEMAKER)
    return caught.value.problems


# ---------------------------------------------------------------- the request and the bundle's parameters


def test_train_hp_request_field_by_field_passes_the_model(current_stack_id: str) -> None:
    rendered = hyperpod_render.render(spec_of(), FOUNDATION, model=SAGEMAKER)
    request = rendered["cluster"]
    hyperpod_render.validate("CreateCluster", request, SAGEMAKER)
    lifecycle = {"SourceS3Uri": FOUNDATION["lifecycle_s3_uri"], "OnCreate": "on_create.sh"}
    storage = [{"EbsVolumeConfig": {"VolumeSizeInGB": 500}}]
    common = {
        "LifeCycleConfig": lifecycle,
        "ExecutionRole": FOUNDATION["execution_role"],
        "ThreadsPerCore": 1,
        "InstanceStorageConfigs": storage,
    }
    assert request == {
        "ClusterName": "train-hp",
        "InstanceGroups": [
            {
                "InstanceGroupName": "controller",
                "InstanceType": "ml.m5.2xlarge",
                "InstanceCount": 1,
                **common,
            },
            {"InstanceGroupName": "login", "InstanceType": "ml.m5.xlarge", "InstanceCount": 1, **common},
            {
                "InstanceGroupName": "a100",
                "InstanceType": "ml.p4d.24xlarge",
                "InstanceCount": 2,
                **common,
                # the example's resilience.deep_health_checks, on the worker group only
                "OnStartDeepHealthChecks": ["InstanceStress", "InstanceConnectivity"],
            },
        ],
        "VpcConfig": {
            "SecurityGroupIds": [FOUNDATION["security_group"]],
            "Subnets": [FOUNDATION["subnet_private"]],
        },
        "Tags": [
            {"Key": "trainstack:cluster", "Value": "train-hp"},
            {"Key": "trainstack:stack", "Value": current_stack_id},
            # train-hp's FSx is not linked to S3: a checkpoint directory only (cluster/storage.py).
            {"Key": "trainstack:checkpoint-dir", "Value": "/fsx/trainstack/checkpoints"},
        ],
        "NodeRecovery": "Automatic",  # resilience.replace_unhealthy_nodes defaults to true
    }
    assert (
        "Orchestrator" not in request
    )  # HyperPod refuses Orchestrator.Slurm beside provisioning_parameters.json
    assert rendered["provisioning_parameters"] == {
        "version": "1.0.0",
        "workload_manager": "slurm",
        "controller_group": "controller",
        "login_group": "login",
        "worker_groups": [{"instance_group_name": "a100", "partition_name": "a100"}],
        "fsx_dns_name": FOUNDATION["fsx_dns_name"],
        "fsx_mountname": FOUNDATION["fsx_mount_name"],
        "munge_key_ssm_parameter": "/trainstack/hyperpod/train-hp/munge-key",
        "aws_region": "us-east-1",
    }


def test_the_nodes_read_the_munge_key_from_ssm_not_from_the_shared_file_system() -> None:
    """No key, no key file on FSx: the lifecycle files name where a node with the cluster's role reads it."""
    params = hyperpod_render.render(spec_of(), FOUNDATION, model=SAGEMAKER)["provisioning_parameters"]
    assert params["munge_key_ssm_parameter"] == hyperpod_render.munge_key_parameter("train-hp")
    assert not any("munge" in str(value) for key, value in params.items() if key != "munge_key_ssm_parameter")


def test_no_login_nodes_no_login_group_and_no_fsx_no_fsx_keys() -> None:
    spec = spec_of()
    spec.pop("login_nodes")
    spec["shared_storage"].pop("fsx_lustre")
    params = hyperpod_render.render(spec, FOUNDATION, model=SAGEMAKER)["provisioning_parameters"]
    assert "login_group" not in params
    assert "fsx_dns_name" not in params and "fsx_mountname" not in params


def test_threads_per_core_2_and_a_root_volume_only_when_the_spec_says_so() -> None:
    spec = spec_of(hyperpod={"threads_per_core": 2, "root_volume_gib": 200, "volume_gib": 1000})
    group = hyperpod_render.render(spec, FOUNDATION, model=SAGEMAKER)["cluster"]["InstanceGroups"][0]
    assert group["ThreadsPerCore"] == 2
    assert group["InstanceStorageConfigs"] == [
        {"EbsVolumeConfig": {"VolumeSizeInGB": 200, "RootVolume": True}},
        {"EbsVolumeConfig": {"VolumeSizeInGB": 1000}},
    ]
    plain = spec_of()
    plain.pop("hyperpod")
    group = hyperpod_render.render(plain, FOUNDATION, model=SAGEMAKER)["cluster"]["InstanceGroups"][0]
    assert group["ThreadsPerCore"] == 1 and "InstanceStorageConfigs" not in group


def test_api_mode_sends_the_topology_in_the_request_and_no_parameters_file() -> None:
    assert hyperpod_render.has_slurm_orchestrator(SAGEMAKER)  # this botocore has Orchestrator.Slurm
    rendered = hyperpod_render.render(spec_of(), FOUNDATION, "api", SAGEMAKER)
    request = rendered["cluster"]
    hyperpod_render.validate("CreateCluster", request, SAGEMAKER)
    assert rendered["provisioning_parameters"] is None
    assert request["Orchestrator"] == {"Slurm": {"SlurmConfigStrategy": "Managed"}}
    controller, login, worker = request["InstanceGroups"]
    assert controller["SlurmConfig"] == {"NodeType": "Controller"}
    assert login["SlurmConfig"] == {"NodeType": "Login"}
    assert worker["SlurmConfig"] == {"NodeType": "Compute", "PartitionNames": ["a100"]}
    fsx = {"DnsName": FOUNDATION["fsx_dns_name"], "MountName": "abcdefgh", "MountPath": "/fsx"}
    assert {"FsxLustreConfig": fsx} in worker["InstanceStorageConfigs"]


@pytest.mark.parametrize("name", ["p4d", "p6-b200"])
def test_example_specs_hyperpod_can_take_render_valid_requests(name: str) -> None:
    spec = spec_of(EXAMPLE_SPECS[name])
    for queue in spec["queues"]:
        queue.pop("capacity_reservation_id", None)
    rendered = hyperpod_render.render(spec, FOUNDATION, model=SAGEMAKER)
    assert hyperpod_render.request_problems("CreateCluster", rendered["cluster"], SAGEMAKER) == ""


def test_offered_types_are_the_models_enum_and_the_mapping_adds_ml() -> None:
    offered = hyperpod_render.offered_types(SAGEMAKER)
    assert offered == tuple(SAGEMAKER.shape_for("ClusterInstanceType").enum)
    assert hyperpod_render.ml_type("p5.48xlarge") == "ml.p5.48xlarge"
    assert hyperpod_render.ml_type("ml.p5.48xlarge") == "ml.p5.48xlarge"
    assert "ml.p5.48xlarge" in offered and "ml.p3dn.24xlarge" not in offered


# ---------------------------------------------------------------- refusals, before any request exists


def test_a_missing_execution_role_is_refused_naming_the_key() -> None:
    foundation = {k: v for k, v in FOUNDATION.items() if k != "execution_role"}
    assert refusal(spec_of(), foundation) == [
        "foundation.execution_role: is required: every HyperPod instance group runs as an IAM role "
        "(ExecutionRole) that SageMaker assumes; give the role's ARN"
    ]
    problems = refusal(spec_of(), {**FOUNDATION, "execution_role": "trainstack-node"})
    assert problems[0].startswith("foundation.execution_role: 'trainstack-node' is not an IAM role ARN")


def test_groups_without_a_lifecycle_prefix_are_refused_naming_the_key() -> None:
    foundation = {k: v for k, v in FOUNDATION.items() if k != "lifecycle_s3_uri"}
    (problem,) = refusal(spec_of(), foundation)
    assert problem.startswith("foundation.lifecycle_s3_uri: is required: every HyperPod instance group")
    (problem,) = refusal(spec_of(), {**FOUNDATION, "lifecycle_s3_uri": "s3://trainstack-data/hyperpod"})
    assert problem.startswith(
        "foundation.lifecycle_s3_uri: bucket trainstack-data does not start with 'sagemaker-'"
    )


def test_an_instance_type_hyperpod_does_not_offer_is_refused_naming_the_key() -> None:
    raw = yaml.safe_load(HYPERPOD_SPEC.read_text())
    raw["queues"][0]["instance_type"] = "g5g.16xlarge"  # in our catalog and the stack, not a HyperPod type
    raw["head_node"]["instance_type"] = "t2.micro"
    problems = refusal(cluster_spec.normalise(raw, "bad"))
    assert problems == [
        "head_node.instance_type: HyperPod does not offer t2.micro (ml.t2.micro is not in the SageMaker "
        "model's ClusterInstanceType, the types HyperPod instance groups take)",
        "queues[0].instance_type: HyperPod does not offer g5g.16xlarge (ml.g5g.16xlarge is not in the "
        "SageMaker model's ClusterInstanceType, the types HyperPod instance groups take)",
    ]


def test_group_names_spot_reservations_and_fsx_outputs_are_checked() -> None:
    raw = yaml.safe_load(HYPERPOD_SPEC.read_text())
    raw["queues"] = [
        {"name": "login-q", "instance_type": "p4d.24xlarge", "max_count": 1},
        {"name": "spot", "instance_type": "p5.48xlarge", "max_count": 1, "capacity_type": "spot"},
        {
            "name": "held",
            "instance_type": "p5.48xlarge",
            "max_count": 1,
            "capacity_reservation_id": "cr-0123456789abcdef0",
        },
    ]
    foundation = {k: v for k, v in FOUNDATION.items() if k != "fsx_mount_name"}
    spec = cluster_spec.normalise(raw, "bad")
    # The spec itself refuses these two names (module_utils/cluster/target_limits.py); the renderer refuses
    # them too, for a spec made in code after normalise.
    spec["queues"][0]["name"], spec["queues"][1]["name"] = "login", "spot-"
    problems = refusal(spec, foundation)
    assert (
        "queues[0].name: 'login' is already the instance group of login_nodes; rename the queue" in problems
    )
    assert any(
        p.startswith("queues[1].name: 'spot-' is not a HyperPod instance group name") for p in problems
    )
    assert "queues[1].capacity_type: HyperPod instance groups run no Spot instances" in problems
    assert any(
        p.startswith("queues[2].capacity_reservation_id: HyperPod takes reserved capacity") for p in problems
    )
    assert any(p.startswith("foundation.fsx_mount_name: is required") for p in problems)


def test_an_unknown_slurm_config_mode_is_refused() -> None:
    assert refusal(spec_of(), mode="file") == [
        "slurm_config: 'file' is not one of provisioning_parameters, api"
    ]


# ---------------------------------------------------------------- broken requests are refused


def rendered_request() -> dict[str, Any]:
    return copy.deepcopy(hyperpod_render.render(spec_of(), FOUNDATION, model=SAGEMAKER)["cluster"])


def test_the_model_refuses_a_missing_member_a_wrong_type_an_enum_and_a_maximum() -> None:
    request = rendered_request()
    del request["InstanceGroups"][0]["ExecutionRole"]
    request["InstanceGroups"][1]["InstanceCount"] = "1"
    request["InstanceGroups"][2]["InstanceType"] = "ml.p3dn.24xlarge"
    request["InstanceGroups"][2]["ThreadsPerCore"] = 3
    report = hyperpod_render.request_problems("CreateCluster", request, SAGEMAKER)
    assert 'Missing required parameter in InstanceGroups[0]: "ExecutionRole"' in report
    assert "Invalid type for parameter InstanceGroups[1].InstanceCount" in report
    assert "InstanceGroups[2].InstanceType: 'ml.p3dn.24xlarge' is not one of ml.p4d.24xlarge" in report
    assert "InstanceGroups[2].ThreadsPerCore: 3 is more than 2" in report


def test_a_group_without_lifecycle_config_is_refused_by_validate() -> None:
    request = rendered_request()
    del request["InstanceGroups"][2]["LifeCycleConfig"]
    request["InstanceGroups"][1]["InstanceGroupName"] = "controller"
    with pytest.raises(hyperpod_render.HyperPodRequestError) as caught:
        hyperpod_render.validate("CreateCluster", request, SAGEMAKER)
    assert caught.value.operation == "CreateCluster"
    assert (
        "InstanceGroups[2] (a100).LifeCycleConfig: HyperPod Slurm groups need SourceS3Uri and OnCreate"
        in str(caught.value)
    )
    assert (
        "InstanceGroups[1] (controller).InstanceGroupName: 'controller' is the name of another group"
        in str(caught.value)
    )


def test_pcs_and_hyperpod_share_one_model_check() -> None:
    """The PCS renderer's check is the shared one: a PCS request walks the same code as a SageMaker one."""
    from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import botocore_model

    pcs = Session().get_service_model("pcs")
    assert pcs_render.request_problems("DeleteCluster", {"clusterIdentifier": 7}, pcs) == (
        botocore_model.request_problems(pcs, "DeleteCluster", {"clusterIdentifier": 7})
    )
