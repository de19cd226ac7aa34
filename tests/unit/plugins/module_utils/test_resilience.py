"""The spec's `resilience:` section (module_utils/cluster/resilience.py) and what each backend renders of it.

The section is checked like the rest of the spec (unknown keys and bad values refused naming
`resilience.<field>`), filled with its defaults, and rendered by every backend with fields of that backend's
pinned model: each rendered request here goes through botocore's own SageMaker, PCS, EKS and Batch models
(module_utils/cluster/botocore_model.py), and the ParallelCluster keys are the ones the pinned ParallelCluster
schema has (tests/integration/cluster/test_pcluster_schema.py runs that schema on them).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import (
    batch_render,
    botocore_model,
    cluster_spec,
    eks_render,
    hyperpod_render,
    pcluster_render,
    pcs_render,
    resilience,
)

from tests.support import REPO
from tests.unit.plugins.cluster_examples import AMI, EXAMPLE_SPECS
from tests.unit.plugins.cluster_examples import FOUNDATION as SHARED_FOUNDATION

pytestmark = pytest.mark.cluster

SPECS = REPO / "inventories" / "aws"
HYPERPOD_FOUNDATION = {
    "subnet_private": "subnet-0b0b0b0b0b0b0b0b0",
    "security_group": "sg-0c0c0c0c0c0c0c0c0",
    "execution_role": "arn:aws:iam::123456789012:role/trainstack-train-hp-hyperpod",
    "lifecycle_s3_uri": "s3://sagemaker-trainstack-train-hp/hyperpod/train-hp",
    "fsx_dns_name": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
    "fsx_mount_name": "abcdefgh",
}
EKS_FOUNDATION = {
    "subnet_public": "subnet-0a0a0a0a0a0a0a0a0",
    "subnet_private": "subnet-0b0b0b0b0b0b0b0b0",
    "security_group": "sg-0c0c0c0c0c0c0c0c0",
    "cluster_role": "arn:aws:iam::123456789012:role/trainstack-train-eks-cluster",
    "node_role": "arn:aws:iam::123456789012:role/trainstack-train-eks-node",
    "placement_group": "trainstack-train-eks",
}
BATCH_FOUNDATION = {
    "subnet_private": "subnet-0b0b0b0b0b0b0b0b0",
    "security_group": "sg-0c0c0c0c0c0c0c0c0",
    "instance_profile": "arn:aws:iam::123456789012:instance-profile/trainstack-node",
    "placement_group": "trainstack-placement",
}
PCS_FOUNDATION = {
    **SHARED_FOUNDATION,
    "instance_profile": "arn:aws:iam::123456789012:instance-profile/aws-pcs/trainstack-node",
}
PCLUSTER_FOUNDATION = {
    **SHARED_FOUNDATION,
    "placement_group": "train-pg",
    "database": {
        "uri": "slurmdb.internal:3306",
        "user_name": "slurm",
        "password_secret_arn": "arn:aws:secretsmanager:us-west-2:123456789012:secret:slurmdb-AbCdEf",
    },
}
OFF = {"health_checks": False, "replace_unhealthy_nodes": False, "auto_resume": False}


def spec_of(path: Any, **section: Any) -> dict[str, Any]:
    """The example spec, normalised, with `resilience` set to `section` (the defaults when empty)."""
    raw = yaml.safe_load(path.read_text())
    raw.pop("resilience", None)
    if section:
        raw["resilience"] = section
    return cluster_spec.normalise(raw, path.stem)


def refusal(section: Any) -> str:
    raw = yaml.safe_load(EXAMPLE_SPECS["p4d"].read_text())
    raw["resilience"] = section
    with pytest.raises(cluster_spec.ClusterSpecError) as caught:
        cluster_spec.normalise(raw, "p4d.yml")
    return str(caught.value)


def model_problems(service: str, operation: str, request: dict[str, Any]) -> str:
    return botocore_model.request_problems(botocore_model.service_model(service), operation, request)


# ---------------------------------------------------------------- the section: defaults and refusals


def test_a_spec_without_the_section_gets_the_defaults() -> None:
    spec = spec_of(EXAMPLE_SPECS["p4d"])
    assert spec["resilience"] == {
        "health_checks": True,
        "replace_unhealthy_nodes": True,
        "deep_health_checks": [],
        "auto_resume": True,
        "max_job_restarts": 2,
    }
    assert resilience.launch_vars(spec["resilience"]) == {"training_job_max_restarts": 2}
    assert resilience.hyperpod_srun_args(spec["resilience"]) == ["--auto-resume=1"]


def test_fields_given_are_kept_and_the_rest_filled() -> None:
    spec = spec_of(EXAMPLE_SPECS["p4d"], deep_health_checks=["connectivity"], max_job_restarts=5)
    assert spec["resilience"]["deep_health_checks"] == ["connectivity"]
    assert spec["resilience"]["max_job_restarts"] == 5
    assert spec["resilience"]["health_checks"] is True
    off = spec_of(EXAMPLE_SPECS["p4d"], auto_resume=False)["resilience"]
    assert resilience.launch_vars(off) == {"training_job_max_restarts": 0}
    assert resilience.hyperpod_srun_args(off) == []


@pytest.mark.parametrize(
    ("section", "fragment"),
    [
        (
            {"health_check": True},
            "p4d.yml: resilience.health_check: unknown key (did you mean 'health_checks'?)",
        ),
        ({"health_checks": "yes"}, "p4d.yml: resilience.health_checks: must be boolean, not"),
        ({"replace_unhealthy_nodes": 1}, "p4d.yml: resilience.replace_unhealthy_nodes: must be boolean"),
        (
            {"deep_health_checks": ["InstanceStress"]},
            "resilience.deep_health_checks[0]: 'InstanceStress' is not",
        ),
        ({"deep_health_checks": "gpu_stress"}, "resilience.deep_health_checks: must be array"),
        (
            {"deep_health_checks": ["gpu_stress", "gpu_stress"]},
            "resilience.deep_health_checks[1]: 'gpu_stress' is already listed",
        ),
        ({"max_job_restarts": 10}, "resilience.max_job_restarts: 10 is more than the maximum 9"),
        ({"max_job_restarts": -1}, "resilience.max_job_restarts: -1 is less than the minimum 0"),
        ({"max_job_restarts": True}, "resilience.max_job_restarts: must be integer"),
        (
            {"auto_resume": False, "max_job_restarts": 3},
            "resilience.max_job_restarts: 3 restarts but auto_resume is false",
        ),
        (None, "p4d.yml: resilience: must be object, not null"),
    ],
    ids=[
        "unknown-key",
        "not-a-bool",
        "int-for-bool",
        "service-name-for-a-check",
        "check-not-a-list",
        "check-twice",
        "too-many-restarts",
        "negative-restarts",
        "bool-for-restarts",
        "restarts-without-auto-resume",
        "null-section",
    ],
)
def test_bad_values_are_refused_naming_the_key(section: Any, fragment: str) -> None:
    assert fragment in refusal(section)


def test_the_published_schema_documents_every_default() -> None:
    assert set(resilience.SCHEMA["properties"]) == set(resilience.DEFAULTS)
    for name, field in resilience.SCHEMA["properties"].items():
        assert field["description"].startswith("default: "), name


# ---------------------------------------------------------------- ParallelCluster 3


def pcluster(spec: dict[str, Any]) -> dict[str, Any]:
    return pcluster_render.render(spec, PCLUSTER_FOUNDATION, AMI)


def test_pcluster_queues_run_the_gpu_health_check_and_the_head_installs_our_prolog() -> None:
    config = pcluster(spec_of(EXAMPLE_SPECS["p5"]))
    for queue in config["Scheduling"]["SlurmQueues"]:
        assert queue["HealthChecks"] == {"Gpu": {"Enabled": True}}
    args = config["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Args"]
    assert "node_bootstrap_health_hooks=false" not in args


def test_pcluster_health_checks_off_reach_the_queues_and_the_head_nodes_bootstrap() -> None:
    config = pcluster(spec_of(EXAMPLE_SPECS["p5"], health_checks=False))
    for queue in config["Scheduling"]["SlurmQueues"]:
        assert queue["HealthChecks"] == {"Gpu": {"Enabled": False}}
    args = config["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Args"]
    assert args[-2:] == ["-e", "node_bootstrap_health_hooks=false"]
    # Only the head node writes the shared prolog; the other nodes' arguments are unchanged.
    assert "-e" not in config["Scheduling"]["SlurmQueues"][0]["CustomActions"]["OnNodeConfigured"]["Args"]


def test_pcluster_refuses_to_keep_unhealthy_nodes() -> None:
    with pytest.raises(pcluster_render.RenderError) as caught:
        pcluster(spec_of(EXAMPLE_SPECS["p5"], replace_unhealthy_nodes=False))
    assert str(caught.value).startswith("resilience.replace_unhealthy_nodes: ParallelCluster always replaces")


def test_node_bootstrap_reads_the_variable_the_renderer_sets() -> None:
    playbook = yaml.safe_load((REPO / "playbooks" / "node_bootstrap.yml").read_text())
    assert playbook[0]["vars"]["node_bootstrap_health_hooks"] is True
    assert (
        resilience.node_bootstrap_args({"health_checks": False})[1].split("=", maxsplit=1)[0]
        in playbook[0]["vars"]
    )


# ---------------------------------------------------------------- SageMaker HyperPod


def hyperpod(**section: Any) -> dict[str, Any]:
    spec = spec_of(SPECS / "hyperpod" / "train-hp.yml", **section)
    return hyperpod_render.render(spec, HYPERPOD_FOUNDATION)


def test_hyperpod_recovers_nodes_automatically_by_default_and_passes_the_model() -> None:
    rendered = hyperpod()
    request = rendered["cluster"]
    assert request["NodeRecovery"] == "Automatic"
    assert all("OnStartDeepHealthChecks" not in group for group in request["InstanceGroups"])
    assert hyperpod_render.request_problems("CreateCluster", request) == ""
    assert any(line.startswith("resilience.auto_resume: ") for line in rendered["not_rendered"])
    assert "--auto-resume=1" in "\n".join(rendered["not_rendered"])


def test_hyperpod_deep_checks_go_to_the_worker_groups_only() -> None:
    request = hyperpod(deep_health_checks=["gpu_stress", "connectivity"], replace_unhealthy_nodes=False)[
        "cluster"
    ]
    assert request["NodeRecovery"] == "None"
    checks = {
        group["InstanceGroupName"]: group.get("OnStartDeepHealthChecks")
        for group in request["InstanceGroups"]
    }
    assert checks == {"controller": None, "login": None, "a100": ["InstanceStress", "InstanceConnectivity"]}
    assert hyperpod_render.request_problems("CreateCluster", request) == ""


def test_hyperpod_request_with_a_recovery_mode_the_model_lacks_is_refused() -> None:
    request = copy.deepcopy(hyperpod()["cluster"])
    request["NodeRecovery"] = "Replace"
    assert "NodeRecovery: 'Replace' is not one of Automatic, None" in hyperpod_render.request_problems(
        "CreateCluster", request
    )


def test_hyperpod_names_are_the_models() -> None:
    model = botocore_model.service_model("sagemaker")
    assert set(resilience.HYPERPOD_DEEP_CHECKS.values()) <= set(model.shape_for("DeepHealthCheckType").enum)
    recovery = model.operation_model("CreateCluster").input_shape.members["NodeRecovery"]
    assert set(recovery.enum) == {"Automatic", "None"}


# ---------------------------------------------------------------- AWS PCS


def pcs_groups(version: str, **section: Any) -> list[dict[str, Any]]:
    spec = spec_of(EXAMPLE_SPECS["p5"], **section)
    names = [queue["name"] for queue in spec["queues"]] + [pcs_render.LOGIN_GROUP]
    own = {name: {"id": "lt-0123456789abcdef1", "version": "1"} for name in names}
    return pcs_render.node_group_requests(spec, PCS_FOUNDATION, AMI, None, own, version)


def test_pcs_node_groups_monitor_and_replace_where_slurm_lets_pcs_check() -> None:
    groups = pcs_groups("26.05", deep_health_checks=["gpu_stress"])
    for group in groups:
        problems = model_problems("pcs", "CreateComputeNodeGroup", group)
        assert problems == "", problems
    queues = [group for group in groups if group["computeNodeGroupName"] != pcs_render.LOGIN_GROUP]
    assert queues and all(
        group["instanceHealthChecks"]
        == {
            "healthMonitoring": {"mode": "STANDARD", "repairAction": "REPLACE"},
            "deepHealthChecks": {"onStart": {"profile": "LONG", "repairAction": "REPLACE"}},
        }
        for group in queues
    )
    login = [group for group in groups if group["computeNodeGroupName"] == pcs_render.LOGIN_GROUP]
    assert login and "instanceHealthChecks" not in login[0]


def test_pcs_keeps_faulty_nodes_isolated_or_checks_nothing_when_asked() -> None:
    isolate = pcs_groups("26.05", replace_unhealthy_nodes=False)[0]
    assert isolate["instanceHealthChecks"] == {
        "healthMonitoring": {"mode": "STANDARD", "repairAction": "ISOLATE"}
    }
    off = pcs_groups("26.05", **OFF)[0]
    assert off["instanceHealthChecks"] == {"healthMonitoring": {"mode": "NONE"}}
    for group in (isolate, off):
        assert model_problems("pcs", "CreateComputeNodeGroup", group) == ""


def test_pcs_before_slurm_26_05_renders_no_checks_and_says_so() -> None:
    assert all("instanceHealthChecks" not in group for group in pcs_groups("25.11"))
    lines = pcs_render.not_rendered(spec_of(EXAMPLE_SPECS["p5"]), "25.11")
    assert any(
        "instanceHealthChecks) from Slurm 26.05 on; this cluster runs Slurm 25.11" in line for line in lines
    )


def test_pcs_deep_check_is_only_for_gpu_types() -> None:
    section = resilience.with_defaults({"deep_health_checks": ["gpu_stress"]})
    assert "deepHealthChecks" not in resilience.pcs_health_checks(section, gpus=False)


def test_pcs_names_are_the_models() -> None:
    model = botocore_model.service_model("pcs")
    documented = model.operation_model("CreateComputeNodeGroup").input_shape.members["instanceHealthChecks"]
    assert f"Slurm version {resilience.PCS_HEALTH_CHECKS_SLURM} or later" in documented.documentation
    assert resilience.PCS_HEALTH_CHECKS_SLURM in pcs_render.PCS_SLURM_VERSIONS
    assert "LONG" in model.shape_for("DeepHealthCheckOnStart").members["profile"].enum
    assert {"REPLACE", "ISOLATE"} <= set(model.shape_for("HealthMonitoring").members["repairAction"].enum)


# ---------------------------------------------------------------- Amazon EKS


def eks(**section: Any) -> dict[str, Any]:
    return eks_render.render(spec_of(SPECS / "eks" / "train-eks.yml", **section), EKS_FOUNDATION, AMI)


@pytest.mark.parametrize(("section", "enabled"), [({}, True), (OFF, False)], ids=["default", "off"])
def test_eks_node_groups_repair_nodes_as_the_spec_says(section: dict[str, Any], enabled: bool) -> None:
    requests = eks(**section)
    eks_render.validate(requests)
    assert [group["nodeRepairConfig"] for group in requests["node_groups"]] == [{"enabled": enabled}] * len(
        requests["node_groups"]
    )


def test_eks_request_with_a_repair_setting_the_model_lacks_is_refused() -> None:
    group = copy.deepcopy(eks()["node_groups"][0])
    group["nodeRepairConfig"] = {"enabled": True, "replace": True}
    assert 'Unknown parameter in nodeRepairConfig: "replace"' in model_problems(
        "eks", "CreateNodegroup", group
    )


# ---------------------------------------------------------------- AWS Batch


def batch(**section: Any) -> dict[str, Any]:
    spec = spec_of(SPECS / "batch" / "train-batch.yml", **section)
    return batch_render.render(
        spec,
        BATCH_FOUNDATION,
        AMI,
        vcpus={"p4d.24xlarge": 96},
        image="registry.example/trainstack:ts-2026.10",
        testcases_dir=REPO / "testcases",
    )


def test_batch_retries_a_job_whose_host_went_away() -> None:
    requests = batch(max_job_restarts=4)
    batch_render.validate(requests)
    for definition in requests["job_definitions"]:
        assert definition["retryStrategy"] == {
            "attempts": 5,
            "evaluateOnExit": [
                {"onStatusReason": "Host EC2*", "action": "RETRY"},
                {"onReason": "*", "action": "EXIT"},
            ],
        }


def test_batch_without_auto_resume_runs_a_job_once() -> None:
    requests = batch(auto_resume=False)
    batch_render.validate(requests)
    assert {str(d["retryStrategy"]) for d in requests["job_definitions"]} == {"{'attempts': 1}"}


def test_batch_request_with_an_action_the_model_lacks_is_refused() -> None:
    definition = copy.deepcopy(batch()["job_definitions"][0])
    definition["retryStrategy"]["evaluateOnExit"][0]["action"] = "REQUEUE"
    assert "'REQUEUE' is not one of RETRY, EXIT" in model_problems(
        "batch", "RegisterJobDefinition", definition
    )
