# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Render a normalised cluster spec (cluster/cluster_spec.py) as a SageMaker HyperPod (Slurm) cluster.

Why a third renderer beside pcluster_render.py and pcs_render.py: HyperPod takes the same cluster as one
SageMaker CreateCluster request of instance groups (a Slurm controller group of one node, a login group, one
worker group per queue), each booting HyperPod's own image and running our lifecycle script, on_create.sh,
from an S3 prefix. The Slurm topology reaches the nodes in one of two ways HyperPod refuses to mix:

- `provisioning_parameters` (the default): the lifecycle prefix holds HyperPod's provisioning_parameters.json
  (controller_group, login_group, worker_groups with partition_name, fsx_dns_name, fsx_mountname, and ours:
  munge_key_ssm_parameter and aws_region), which the lifecycle script reads; the request carries no
  Orchestrator and no SlurmConfig.
- `api`: the request says it itself (Orchestrator.Slurm, each group's SlurmConfig, FSx as the group's
  FsxLustreConfig) and the prefix must hold no provisioning_parameters.json. Only where the installed
  botocore's SageMaker model has Orchestrator.Slurm.

HyperPod offers only `ml.` instance types. The list of what it offers is the SageMaker model's own enum
ClusterInstanceType (botocore/data/sagemaker/2017-07-24/service-2.json): an EC2 type of our catalog is offered
exactly when `ml.<type>` is in it, so there is no list of ours to keep up to date.

The functions here are pure: data in, request data out, nothing sent. validate() holds every request to the
model (module_utils/cluster/botocore_model.py) and to HyperPod's rules the model does not state.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import (
    botocore_model,
    resilience,
    storage,
)

CONTROLLER_GROUP = "controller"
LOGIN_GROUP = "login"
ON_CREATE = "on_create.sh"
PROVISIONING_PARAMETERS = "provisioning_parameters.json"
SLURM_CONFIG_MODES = ("provisioning_parameters", "api")
# The cluster's munge key: an SSM SecureString the module writes before the cluster exists, deletes with it.
# Why there and not on the shared file system: FSx is readable by root on every client of the file system and
# outlives the cluster, and HyperPod replaces and adds nodes long after the first ones booted, so the key must
# stay where a new node can read it: SSM, read with the cluster's execution role only (aws_foundation's
# hyperpod-lifecycle policy), encrypted with the account's aws/ssm key.
MUNGE_KEY_PARAMETER = "/trainstack/hyperpod/{name}/munge-key"
# The model's ClusterInstanceGroupName / ClusterName pattern, anchored (the model's patterns are unanchored).
GROUP_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9])*")
GROUP_NAME_MAX = 63
ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[A-Za-z0-9_+=,.@/-]+$")
# AmazonSageMakerClusterInstanceRolePolicy, the managed policy of HyperPod's execution roles, lets nodes read
# lifecycle scripts only from buckets whose names start with this.
LIFECYCLE_BUCKET_PREFIX = "sagemaker-"
S3_PREFIX_URI = re.compile(r"^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/[^\s]*)?$")
FOUNDATION_KEYS = (
    "subnet_private",
    "security_group",
    "execution_role",
    "lifecycle_s3_uri",
    "fsx_dns_name",
    "fsx_mount_name",
)


class HyperPodRenderError(ValueError):
    """The spec or an input asks for what HyperPod cannot do; one '<key>: <rule>' line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class HyperPodRequestError(ValueError):
    """A rendered (or hand-made) request that the SageMaker model or HyperPod's rules refuse."""

    def __init__(self, operation: str, report: str) -> None:
        super().__init__(
            f"{operation} does not match botocore's SageMaker model or HyperPod's rules:\n{report}"
        )
        self.operation = operation
        self.report = report


# ---------------------------------------------------------------- what HyperPod offers


def munge_key_parameter(name: str) -> str:
    """The SSM parameter that holds the munge key of HyperPod cluster `name` (MUNGE_KEY_PARAMETER)."""
    return MUNGE_KEY_PARAMETER.format(name=name)


def offered_types(model: Any = None) -> tuple[str, ...]:
    """The `ml.` instance types HyperPod offers: the SageMaker model's ClusterInstanceType enum."""
    model = model or botocore_model.service_model("sagemaker")
    return tuple(model.shape_for("ClusterInstanceType").enum)


def ml_type(instance_type: str) -> str:
    """HyperPod's name of an EC2 instance type: `p5.48xlarge` is `ml.p5.48xlarge`."""
    return instance_type if instance_type.startswith("ml.") else f"ml.{instance_type}"


def has_slurm_orchestrator(model: Any = None) -> bool:
    """Whether the installed botocore's CreateCluster takes Orchestrator.Slurm (API-driven Slurm topology)."""
    model = model or botocore_model.service_model("sagemaker")
    members = model.operation_model("CreateCluster").input_shape.members
    return "Orchestrator" in members and "Slurm" in members["Orchestrator"].members


# ---------------------------------------------------------------- checks before anything is rendered


def _groups(spec: Mapping[str, Any]) -> list[tuple[str, str, str, int]]:
    """(spec key, group name, EC2 type, count) of every instance group: controller, login, one per queue.

    A HyperPod group has a fixed number of nodes (no Slurm power saving), so a queue's group has max_count."""
    found = [("head_node", CONTROLLER_GROUP, spec["head_node"]["instance_type"], 1)]
    login = spec.get("login_nodes")
    if login:
        found.append(("login_nodes", LOGIN_GROUP, login["instance_type"], login["count"]))
    found += [
        (f"queues[{index}]", queue["name"], queue["instance_type"], queue["max_count"])
        for index, queue in enumerate(spec["queues"])
    ]
    return found


def _name_problems(spec: Mapping[str, Any], groups: list[tuple[str, str, str, int]]) -> list[str]:
    found = []
    if not GROUP_NAME.fullmatch(spec["name"]) or len(spec["name"]) > GROUP_NAME_MAX:
        found.append(
            f"name: HyperPod cluster names are 1 to {GROUP_NAME_MAX} letters, digits and single hyphens "
            f"between them; {spec['name']!r} is not one"
        )
    seen: dict[str, str] = {}
    for key, name, _type, _count in groups:
        where = f"{key}.name" if key.startswith("queues") else key
        if not GROUP_NAME.fullmatch(name) or len(name) > GROUP_NAME_MAX:
            found.append(
                f"{where}: {name!r} is not a HyperPod instance group name (1 to {GROUP_NAME_MAX} letters, "
                "digits and hyphens, starting and ending with a letter or digit)"
            )
        if name in seen:
            found.append(f"{where}: {name!r} is already the instance group of {seen[name]}; rename the queue")
        seen.setdefault(name, key)
    return found


def _type_problems(groups: list[tuple[str, str, str, int]], offered: tuple[str, ...]) -> list[str]:
    found = []
    for key, _name, itype, _count in groups:
        if ml_type(itype) not in offered:
            found.append(
                f"{key}.instance_type: HyperPod does not offer {itype} ({ml_type(itype)} is not in the "
                "SageMaker model's ClusterInstanceType, the types HyperPod instance groups take)"
            )
    return found


def _queue_problems(spec: Mapping[str, Any]) -> list[str]:
    """What a queue asks that a HyperPod instance group has no field for."""
    found = []
    for index, queue in enumerate(spec["queues"]):
        if queue["capacity_type"] == "spot":
            found.append(f"queues[{index}].capacity_type: HyperPod instance groups run no Spot instances")
        if queue.get("capacity_reservation_id"):
            found.append(
                f"queues[{index}].capacity_reservation_id: HyperPod takes reserved capacity as a SageMaker "
                "training plan (TrainingPlanArn), not an EC2 capacity reservation; remove it"
            )
    return found


def _foundation_problems(spec: Mapping[str, Any], foundation: Mapping[str, Any]) -> list[str]:
    found = [
        f"foundation.{key}: not a known key (known: {', '.join(FOUNDATION_KEYS)})"
        for key in sorted(set(foundation) - set(FOUNDATION_KEYS))
    ]
    role = foundation.get("execution_role")
    if not role:
        found.append(
            "foundation.execution_role: is required: every HyperPod instance group runs as an IAM role "
            "(ExecutionRole) that SageMaker assumes; give the role's ARN"
        )
    elif not ROLE_ARN.match(str(role)):
        found.append(
            f"foundation.execution_role: {role!r} is not an IAM role ARN (arn:aws:iam::<account>:role/..)"
        )
    uri = foundation.get("lifecycle_s3_uri")
    match = S3_PREFIX_URI.match(str(uri or ""))
    if not uri:
        found.append(
            "foundation.lifecycle_s3_uri: is required: every HyperPod instance group (LifeCycleConfig) runs "
            f"{ON_CREATE} from this S3 prefix"
        )
    elif not match:
        found.append(f"foundation.lifecycle_s3_uri: {uri!r} is not an s3://<bucket>/<prefix> URI")
    elif not match.group(1).startswith(LIFECYCLE_BUCKET_PREFIX):
        found.append(
            f"foundation.lifecycle_s3_uri: bucket {match.group(1)} does not start with "
            f"{LIFECYCLE_BUCKET_PREFIX!r}; HyperPod's execution role policy (AmazonSageMakerClusterInstance"
            "RolePolicy) reads lifecycle scripts only from such buckets"
        )
    for key in ("subnet_private", "security_group"):
        if not foundation.get(key) and not (key == "subnet_private" and spec["network"]["vpc"] == "existing"):
            found.append(
                f"foundation.{key}: is required: the cluster's nodes join the foundation's VPC (VpcConfig)"
            )
    if spec["shared_storage"].get("fsx_lustre"):
        for key in ("fsx_dns_name", "fsx_mount_name"):
            if not foundation.get(key):
                found.append(
                    f"foundation.{key}: is required: shared_storage.fsx_lustre is set, and every node mounts "
                    "the foundation's file system"
                )
    return found


def problems(
    spec: Mapping[str, Any], foundation: Mapping[str, Any], slurm_config: str, model: Any = None
) -> list[str]:
    """Every reason this spec and foundation cannot become a HyperPod cluster, each naming its key."""
    model = model or botocore_model.service_model("sagemaker")
    groups = _groups(spec)
    found = _name_problems(spec, groups) + _type_problems(groups, offered_types(model))
    found += _queue_problems(spec) + _foundation_problems(spec, foundation)
    if slurm_config not in SLURM_CONFIG_MODES:
        found.append(f"slurm_config: {slurm_config!r} is not one of {', '.join(SLURM_CONFIG_MODES)}")
    elif slurm_config == "api" and not has_slurm_orchestrator(model):
        found.append(
            "slurm_config: api needs Orchestrator.Slurm, which the installed botocore's SageMaker model does "
            "not have; upgrade botocore or use provisioning_parameters"
        )
    return found


# ---------------------------------------------------------------- the request and the bundle's parameters


def _storage(
    spec: Mapping[str, Any], foundation: Mapping[str, Any], slurm_config: str
) -> list[dict[str, Any]]:
    settings = spec.get("hyperpod") or {}
    found: list[dict[str, Any]] = []
    if settings.get("root_volume_gib"):
        found.append({"EbsVolumeConfig": {"VolumeSizeInGB": settings["root_volume_gib"], "RootVolume": True}})
    if settings.get("volume_gib"):
        found.append({"EbsVolumeConfig": {"VolumeSizeInGB": settings["volume_gib"]}})
    fsx = spec["shared_storage"].get("fsx_lustre")
    if fsx and slurm_config == "api":
        lustre = {
            "DnsName": foundation["fsx_dns_name"],
            "MountName": foundation["fsx_mount_name"],
            "MountPath": fsx["mount_dir"],
        }
        found.append({"FsxLustreConfig": lustre})
    return found


def _slurm_config(key: str, name: str) -> dict[str, Any]:
    if key == "head_node":
        return {"NodeType": "Controller"}
    if key == "login_nodes":
        return {"NodeType": "Login"}
    return {"NodeType": "Compute", "PartitionNames": [name]}


def cluster_request(
    spec: Mapping[str, Any], foundation: Mapping[str, Any], slurm_config: str
) -> dict[str, Any]:
    """CreateCluster: every group from one lifecycle prefix, role and storage; nodes in the compute subnet."""
    threads = (spec.get("hyperpod") or {}).get("threads_per_core", 1)
    section = resilience.of(spec)
    storage_configs = _storage(spec, foundation, slurm_config)
    groups = []
    for key, name, itype, count in _groups(spec):
        group: dict[str, Any] = {
            "InstanceGroupName": name,
            "InstanceType": ml_type(itype),
            "InstanceCount": count,
            "LifeCycleConfig": {"SourceS3Uri": foundation["lifecycle_s3_uri"], "OnCreate": ON_CREATE},
            "ExecutionRole": foundation["execution_role"],
            "ThreadsPerCore": threads,
        }
        if storage_configs:
            group["InstanceStorageConfigs"] = storage_configs
        if slurm_config == "api":
            group["SlurmConfig"] = _slurm_config(key, name)
        if key.startswith("queues"):
            # Deep checks hold a node out of Slurm until they pass: worth it where jobs run, not on the
            # controller or the login nodes.
            group.update(resilience.hyperpod_worker_group(section))
        groups.append(group)
    network = spec["network"]
    subnet = network["private_subnet_id"] if network["vpc"] == "existing" else foundation["subnet_private"]
    request: dict[str, Any] = {
        "ClusterName": spec["name"],
        "InstanceGroups": groups,
        "VpcConfig": {"SecurityGroupIds": [foundation["security_group"]], "Subnets": [subnet]},
        # The cluster's name and stack, and where its data and checkpoints go (cluster/storage.py): the
        # ec2_cluster inventory reads the cluster's tags for the launch.
        "Tags": [
            {"Key": "trainstack:cluster", "Value": spec["name"]},
            {"Key": "trainstack:stack", "Value": spec["image"]["stack"]},
            *({"Key": key, "Value": value} for key, value in storage.tags(spec).items()),
        ],
    }
    if slurm_config == "api":
        request["Orchestrator"] = {"Slurm": {"SlurmConfigStrategy": "Managed"}}
    request.update(resilience.hyperpod_cluster(section))
    return request


def provisioning_parameters(spec: Mapping[str, Any], foundation: Mapping[str, Any]) -> dict[str, Any]:
    """HyperPod's provisioning_parameters.json (version 1.0.0): which group is the controller, which the login
    nodes, and the partition of each worker group; the FSx file system every node mounts; and, for our
    lifecycle script, where the nodes read the munge key (the SSM parameter and its region)."""
    params: dict[str, Any] = {
        "version": "1.0.0",
        "workload_manager": "slurm",
        "controller_group": CONTROLLER_GROUP,
    }
    if spec.get("login_nodes"):
        params["login_group"] = LOGIN_GROUP
    params["worker_groups"] = [
        {"instance_group_name": queue["name"], "partition_name": queue["name"]} for queue in spec["queues"]
    ]
    if spec["shared_storage"].get("fsx_lustre"):
        params["fsx_dns_name"] = foundation["fsx_dns_name"]
        params["fsx_mountname"] = foundation["fsx_mount_name"]
    params["munge_key_ssm_parameter"] = munge_key_parameter(spec["name"])
    params["aws_region"] = spec["region"]
    return params


def not_rendered(spec: Mapping[str, Any]) -> list[str]:
    """Keys of the spec no HyperPod request carries, each with why (reported, not refused)."""
    found = [
        "image: HyperPod boots its own image; the node bundle installs the stack's roles on it",
        "queues[].min_count: a HyperPod instance group has a fixed size, its queue's max_count",
        "queues[].efa, queues[].placement_group: HyperPod sets up EFA and placement itself",
    ]
    if spec["shared_storage"].get("efs_home"):
        found.append("shared_storage.efs_home: HyperPod mounts no EFS; the lifecycle script must")
    if spec["slurm_accounting"]:
        found.append("slurm_accounting: no SageMaker field; the lifecycle script's node playbook sets it up")
    if spec["head_node"].get("ssh_key_name"):
        found.append("head_node.ssh_key_name: HyperPod nodes are reached through SSM, not an EC2 key pair")
    return found + resilience.hyperpod_not_rendered(resilience.of(spec))


def render(
    spec: Mapping[str, Any],
    foundation: Mapping[str, Any],
    slurm_config: str = "provisioning_parameters",
    model: Any = None,
) -> dict[str, Any]:
    """{'cluster': CreateCluster, 'provisioning_parameters': the bundle's file or None, 'not_rendered'}.

    Every problem is collected and raised at once (HyperPodRenderError), before any request exists."""
    found = problems(spec, foundation, slurm_config, model)
    if found:
        raise HyperPodRenderError(found)
    return {
        "cluster": cluster_request(spec, foundation, slurm_config),
        "provisioning_parameters": (
            provisioning_parameters(spec, foundation) if slurm_config == "provisioning_parameters" else None
        ),
        "not_rendered": not_rendered(spec),
    }


# ---------------------------------------------------------------- validation


def _group_rules(groups: list[Any], offered: tuple[str, ...]) -> list[str]:
    """HyperPod's rules the model leaves optional or unanchored: every group runs a lifecycle script as a
    role, has a name HyperPod takes, an `ml.` type HyperPod offers, and a name no other group has."""
    found = []
    names: list[str] = []
    for index, group in enumerate(groups):
        if not isinstance(group, Mapping):
            continue
        name = str(group.get("InstanceGroupName", ""))
        where = f"InstanceGroups[{index}] ({name})"
        life = group.get("LifeCycleConfig") or {}
        if not life.get("SourceS3Uri") or not life.get("OnCreate"):
            found.append(
                f"{where}.LifeCycleConfig: HyperPod Slurm groups need SourceS3Uri and OnCreate (the "
                "lifecycle script that makes the node a Slurm controller, login or worker node)"
            )
        if not GROUP_NAME.fullmatch(name):
            found.append(f"{where}.InstanceGroupName: does not match {GROUP_NAME.pattern} as a whole")
        if name in names:
            found.append(f"{where}.InstanceGroupName: {name!r} is the name of another group")
        names.append(name)
        if "InstanceType" in group and group["InstanceType"] not in offered:
            found.append(f"{where}.InstanceType: {group['InstanceType']!r} is not a type HyperPod offers")
    return found


def request_problems(operation: str, request: Mapping[str, Any], model: Any = None) -> str:
    """Empty when `request` is input the SageMaker model and HyperPod's group rules accept."""
    model = model or botocore_model.service_model("sagemaker")
    report = botocore_model.request_problems(model, operation, request)
    lines = [report] if report else []
    groups = request.get("InstanceGroups")
    if isinstance(groups, list):
        lines += _group_rules(groups, offered_types(model))
    return "\n".join(lines)


def validate(operation: str, request: Mapping[str, Any], model: Any = None) -> None:
    """HyperPodRequestError naming the operation when `request` is not one it accepts."""
    report = request_problems(operation, request, model)
    if report:
        raise HyperPodRequestError(operation, report)
