# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Render a normalised cluster spec (cluster/cluster_spec.py) as the AWS PCS requests that make it.

Why a second renderer beside pcluster_render.py: the same spec and the same foundation record describe the
cluster, but PCS is an API, not a configuration file. It runs the Slurm controller itself, so there is no head
node; each queue becomes a compute node group (our AMI through a launch template) and a queue on it, and login
nodes become a node group of their own. Several things ParallelCluster takes as keys (EFA interfaces, the
placement group, a capacity reservation) PCS only takes through the node group's EC2 launch template, so this
module refuses a spec that asks for them unless the queue has a launch template of its own, naming the key.

The functions here are pure: data in, request data out, nothing sent. The requests are plain boto3 keyword
arguments; validate() checks them against botocore's model of the PCS API before any of them is sent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.catalog import instance_catalog
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import (
    botocore_model,
    resilience,
    storage,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.cluster_spec import (
    image_flavour_problems,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.errors import (
    RenderError,
    RequestError,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.pcluster_render import (
    BOOTSTRAP_KEY,
    BUNDLE_PREFIX,
    FOUNDATION_KEYS,
    SHA256,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.stack.stack_matrix import StackError
from ansible_collections.trainstack.cluster.plugins.module_utils.stack.stack_resolver import (
    load_stack,
    stacks_dir,
)

# CreateCluster scheduler.version: the values botocore's PCS model (2023-02-10) documents as valid. The model
# gives them in prose, not as an enum, so a unit test keeps this tuple equal to the model's text.
PCS_SLURM_VERSIONS = ("24.11", "25.05", "25.11", "26.05")
# The image factory's flavour with the PCS agent and a Slurm PCS runs (docs/aws-pcs.md#the-pcs-gpu-image).
PCS_FLAVOUR = "pcs-gpu"
# CreateCluster size: the most compute nodes each size manages (the model's documentation of Size).
PCS_SIZES = (("SMALL", 32), ("MEDIUM", 512), ("LARGE", 2048))
PURCHASE_OPTION = {"on_demand": "ONDEMAND", "spot": "SPOT", "capacity_block": "CAPACITY_BLOCK"}
# PCS names (cluster, node group, queue): a letter first, then letters, digits and '-'.
CLUSTER_NAME_LENGTH = (3, 40)
GROUP_NAME_LENGTH = (3, 25)
LOGIN_GROUP = "login"
LAUNCH_TEMPLATE_ID = re.compile(r"^lt-[0-9a-f]{8,17}$")
AMI_ID = re.compile(r"^ami-[0-9a-f]{8,17}$")
OPERATIONS = ("CreateCluster", "CreateComputeNodeGroup", "CreateQueue")


class PcsRenderError(RenderError):
    """The spec asks for what PCS cannot do, or an input is missing; one '<key>: <rule>' line per problem."""


class PcsRequestError(RequestError):
    """A rendered request is not one the PCS API model accepts; names the operation and the request."""

    MODEL = "botocore's PCS model"


# ---------------------------------------------------------------- checks before anything is rendered


def slurm_version(stack: Mapping[str, Any]) -> tuple[str | None, list[str]]:
    """The PCS scheduler version of the image's Slurm (major.minor), or why PCS cannot run it: the nodes'
    slurmd comes from our AMI and must be the release PCS's controller runs."""
    component = (stack.get("components") or {}).get("slurm") or {}
    version = str(component.get("version") or "")
    release = ".".join(version.split(".")[:2])
    if release in PCS_SLURM_VERSIONS:
        return release, []
    found = f"Slurm {version}" if version else "no Slurm"
    return None, [
        f"image.stack: stack {stack.get('id')} builds {found} into the image; PCS runs Slurm "
        f"{', '.join(PCS_SLURM_VERSIONS)} (CreateCluster scheduler.version)"
    ]


def _name_problems(spec: Mapping[str, Any]) -> list[str]:
    """PCS's length limits are tighter than ParallelCluster's; a queue may not take the login group's name."""
    found = []
    low, high = CLUSTER_NAME_LENGTH
    if not low <= len(spec["name"]) <= high:
        found.append(
            f"name: PCS cluster names are {low} to {high} characters; "
            f"{spec['name']!r} has {len(spec['name'])}"
        )
    low, high = GROUP_NAME_LENGTH
    for index, queue in enumerate(spec["queues"]):
        if len(queue["name"]) < low:
            found.append(
                f"queues[{index}].name: PCS queue and node group names are {low} to {high} characters; "
                f"{queue['name']!r} has {len(queue['name'])}"
            )
        if queue["name"] == LOGIN_GROUP and spec.get("login_nodes"):
            found.append(
                f"queues[{index}].name: {LOGIN_GROUP!r} is the name of the login nodes' node group; "
                "rename the queue"
            )
    return found


def _size(spec: Mapping[str, Any]) -> tuple[str | None, list[str]]:
    """The smallest PCS size that manages every node the spec can start (queues at max_count, login nodes)."""
    nodes = sum(queue["max_count"] for queue in spec["queues"])
    nodes += (spec.get("login_nodes") or {}).get("count", 0)
    for size, limit in PCS_SIZES:
        if nodes <= limit:
            return size, []
    return None, [
        f"queues: the queues' max_count and login_nodes.count add up to {nodes} nodes; the largest "
        f"PCS cluster (size {PCS_SIZES[-1][0]}) manages {PCS_SIZES[-1][1]}"
    ]


def _launch_template_settings(queue: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, why) for each setting of the queue that PCS takes only from the node group's launch template."""
    found = []
    if queue["efa"]:
        found.append(("efa", "EFA interfaces are network interfaces of the launch template"))
    if queue["placement_group"]:
        found.append(("placement_group", "the placement group is the launch template's Placement"))
    if queue.get("capacity_reservation_id"):
        found.append(
            (
                "capacity_reservation_id",
                f"{queue['capacity_reservation_id']} is targeted by the launch template's "
                "CapacityReservationSpecification",
            )
        )
    return found


def _launch_template_problems(
    spec: Mapping[str, Any], default: Mapping[str, Any] | None, own: Mapping[str, Any]
) -> list[str]:
    """Every node group needs a launch template; a queue with launch-template-only settings needs its own."""
    found = []
    groups = [queue["name"] for queue in spec["queues"]] + ([LOGIN_GROUP] if spec.get("login_nodes") else [])
    for name in sorted(set(own) - set(groups)):
        found.append(f"launch_templates.{name}: no queue or login node group of the spec has this name")
    for name, template in sorted({**own, **({"": default} if default else {})}.items()):
        where = f"launch_templates.{name}" if name else "launch_template"
        if not isinstance(template, Mapping) or not LAUNCH_TEMPLATE_ID.match(str(template.get("id") or "")):
            found.append(f"{where}.id: must be an EC2 launch template id (lt- and 8 to 17 hex digits)")
    for index, queue in enumerate(spec["queues"]):
        if queue["name"] in own:
            continue
        for key, why in _launch_template_settings(queue):
            instead = "remove it" if key == "capacity_reservation_id" else "set it to false"
            found.append(
                f"queues[{index}].{key}: CreateComputeNodeGroup has no field for it ({why}); give queue "
                f"{queue['name']!r} its own launch template in launch_templates.{queue['name']}, or {instead}"
            )
        if default is None and not _launch_template_settings(queue):
            found.append(
                f"launch_template: queue {queue['name']!r} (queues[{index}]) has no launch template of "
                "its own; every PCS node group launches from one (our AMI overrides its image)"
            )
    if spec.get("login_nodes") and LOGIN_GROUP not in own and default is None:
        found.append(
            "launch_template: the login nodes (login_nodes) have no launch template; give launch_template or "
            f"launch_templates.{LOGIN_GROUP}"
        )
    return found


def _foundation_problems(spec: Mapping[str, Any], foundation: Mapping[str, Any]) -> list[str]:
    found = []
    unknown = sorted(set(foundation) - set(FOUNDATION_KEYS))
    found += [f"foundation.{key}: not a known key (known: {', '.join(FOUNDATION_KEYS)})" for key in unknown]
    if not foundation.get("instance_profile"):
        found.append(
            "foundation.instance_profile: is required: every PCS node group launches with an instance "
            "profile (CreateComputeNodeGroup iamInstanceProfileArn)"
        )
    if spec["network"]["vpc"] == "new":
        for key in ("subnet_public", "subnet_private"):
            if not foundation.get(key):
                found.append(
                    f"foundation.{key}: is required: network.vpc is new, so the foundation's subnets are used"
                )
    digest = foundation.get("bundle_sha256")
    if digest and not SHA256.match(str(digest)):
        found.append(
            "foundation.bundle_sha256: must be the 64 lowercase hex digits of the node bundle's sha256"
        )
    if bool(digest) != bool(foundation.get("bucket")):
        found.append(
            "foundation.bucket, foundation.bundle_sha256: give both (nodes run the bootstrap script from the "
            "bucket with the bundle of this sha256) or neither"
        )
    return found


def _ami_problems(spec: Mapping[str, Any], ami_id: str | None) -> tuple[str | None, list[str]]:
    ami = ami_id or spec["image"].get("ami_id")
    if not ami:
        return None, [
            "image.tags: the AMI is found by its tags in AWS; look it up (amazon.aws.ec2_ami_info) and "
            "pass its id as ami_id"
        ]
    if not AMI_ID.match(ami):
        return None, [f"ami_id: {ami!r} is not an AMI id (ami- and 8 to 17 hex digits)"]
    return ami, []


# ---------------------------------------------------------------- the requests


def _subnets(spec: Mapping[str, Any], foundation: Mapping[str, Any]) -> tuple[str, str]:
    network = spec["network"]
    if network["vpc"] == "existing":
        return network["public_subnet_id"], network["private_subnet_id"]
    return foundation["subnet_public"], foundation["subnet_private"]


def _tags(spec: Mapping[str, Any]) -> dict[str, str]:
    """The cluster's name and stack, and where its data and checkpoints go (cluster/storage.py)."""
    return {
        "trainstack:cluster": spec["name"],
        "trainstack:stack": spec["image"]["stack"],
        **storage.tags(spec),
    }


def _bootstrap(foundation: Mapping[str, Any], role: str) -> dict[str, Any]:
    """The node bootstrap ParallelCluster's nodes run, as a PCS lifecycle action once the node has booted."""
    bucket, digest = foundation["bucket"], foundation["bundle_sha256"]
    script = {
        "name": "trainstack-bootstrap",
        "scriptSource": {"scriptLocation": f"s3://{bucket}/{BOOTSTRAP_KEY}"},
        "arguments": [role, "--bundle", f"s3://{bucket}/{BUNDLE_PREFIX}{digest}.tar.gz", "--sha256", digest],
        "onError": "TERMINATE",
        "executionPolicy": "FIRST_BOOT_ONLY",
    }
    return {"stages": {"nodeBootstrapped": [script]}}


def cluster_request(
    spec: Mapping[str, Any], foundation: Mapping[str, Any], version: str, size: str
) -> dict[str, Any]:
    """CreateCluster: the controller's interfaces go into the compute subnet (PCS takes exactly one)."""
    private = _subnets(spec, foundation)[1]
    networking: dict[str, Any] = {"subnetIds": [private]}
    if foundation.get("security_group"):
        networking["securityGroupIds"] = [foundation["security_group"]]
    request: dict[str, Any] = {
        "clusterName": spec["name"],
        "scheduler": {"type": "SLURM", "version": version},
        "size": size,
        "networking": networking,
    }
    if spec["slurm_accounting"]:
        # PCS keeps the accounting database itself: no external database, unlike ParallelCluster.
        request["slurmConfiguration"] = {"accounting": {"mode": "STANDARD"}}
    request["tags"] = _tags(spec)
    return request


def _node_group(
    spec: Mapping[str, Any],
    foundation: Mapping[str, Any],
    *,
    name: str,
    instance_type: str,
    counts: tuple[int, int],
    subnet: str,
    template: Mapping[str, Any],
    role: str,
    security_groups: bool,
    ami: str,
    purchase: str,
) -> dict[str, Any]:
    request: dict[str, Any] = {
        "clusterIdentifier": spec["name"],
        "computeNodeGroupName": name,
        "amiId": ami,
        "subnetIds": [subnet],
        "customLaunchTemplate": {"id": template["id"], "version": str(template.get("version") or "1")},
        "iamInstanceProfileArn": foundation["instance_profile"],
        "scalingConfiguration": {"minInstanceCount": counts[0], "maxInstanceCount": counts[1]},
        "instanceConfigs": [{"instanceType": instance_type}],
        "purchaseOption": purchase,
    }
    if security_groups and foundation.get("security_group"):
        request["securityGroupIds"] = [foundation["security_group"]]
    if foundation.get("bucket"):
        request["nodeLifecycleActions"] = _bootstrap(foundation, role)
    request["tags"] = _tags(spec)
    return request


def _has_gpus(instance_type: str) -> bool:
    itype = instance_catalog.default().find(instance_type)
    return bool(itype and (itype.gpu_count or 0) > 0)


def node_group_requests(
    spec: Mapping[str, Any],
    foundation: Mapping[str, Any],
    ami: str,
    default: Mapping[str, Any] | None,
    own: Mapping[str, Any],
    version: str = "",
) -> list[dict[str, Any]]:
    """CreateComputeNodeGroup for each queue (compute subnet), then the login nodes (public subnet).

    A queue with its own launch template gets no securityGroupIds: PCS refuses them beside a template that
    defines network interfaces, which an EFA template does, so its template carries the security group.
    A queue's group takes the spec's health checks where the cluster's Slurm `version` lets PCS run them;
    the login nodes' group runs no jobs and takes none."""
    public, private = _subnets(spec, foundation)
    section = resilience.of(spec)
    found = []
    for queue in spec["queues"]:
        request = _node_group(
            spec,
            foundation,
            name=queue["name"],
            instance_type=queue["instance_type"],
            counts=(queue["min_count"], queue["max_count"]),
            subnet=private,
            template=own.get(queue["name"]) or default or {},
            role="compute",
            security_groups=queue["name"] not in own,
            ami=ami,
            purchase=PURCHASE_OPTION[queue["capacity_type"]],
        )
        if queue["capacity_type"] == "spot":
            request["spotOptions"] = {"allocationStrategy": "price-capacity-optimized"}
        if resilience.pcs_offers_health_checks(version):
            request["instanceHealthChecks"] = resilience.pcs_health_checks(
                section, gpus=_has_gpus(queue["instance_type"])
            )
        found.append(request)
    login = spec.get("login_nodes")
    if login:
        request = _node_group(
            spec,
            foundation,
            name=LOGIN_GROUP,
            instance_type=login["instance_type"],
            counts=(login["count"], login["count"]),
            subnet=public,
            template=own.get(LOGIN_GROUP) or default or {},
            role="login",
            security_groups=LOGIN_GROUP not in own,
            ami=ami,
            purchase="ONDEMAND",
        )
        if spec["head_node"].get("ssh_key_name"):
            # PCS has no head node: the key users log in with goes to the login nodes.
            request["sshKeyName"] = spec["head_node"]["ssh_key_name"]
        found.append(request)
    return found


def queue_requests(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """CreateQueue per queue, on the node group of its name. computeNodeGroupId holds the group's name here;
    the caller puts the id PCS answered with in its place before sending."""
    return [
        {
            "clusterIdentifier": spec["name"],
            "queueName": queue["name"],
            "computeNodeGroupConfigurations": [{"computeNodeGroupId": queue["name"]}],
            "tags": _tags(spec),
        }
        for queue in spec["queues"]
    ]


def not_rendered(spec: Mapping[str, Any], version: str = "") -> list[str]:
    """Keys of the spec no PCS request carries, each with where it goes instead (reported, not refused)."""
    found = [
        "head_node.instance_type: PCS runs the Slurm controller itself "
        f"({spec['head_node']['instance_type']} is not used)"
    ]
    storage = spec["shared_storage"]
    if storage.get("fsx_lustre"):
        found.append(
            "shared_storage.fsx_lustre: PCS mounts no file system; the launch template's user data mounts "
            "the foundation's FSx for Lustre file system"
        )
    if storage.get("efs_home"):
        found.append(
            "shared_storage.efs_home: PCS mounts no file system; the launch template's user data mounts it"
        )
    found.append(
        "monitoring: PCS has no monitoring setting; detailed monitoring is the launch template's, and the "
        "exporters come with the node bootstrap"
    )
    return found + resilience.pcs_not_rendered(resilience.of(spec), version)


def render(
    spec: Mapping[str, Any],
    foundation: Mapping[str, Any],
    ami_id: str | None = None,
    launch_template: Mapping[str, Any] | None = None,
    launch_templates: Mapping[str, Any] | None = None,
    *,
    stacks: str | Path | None = None,
) -> dict[str, Any]:
    """The PCS requests of a normalised spec: {'cluster', 'node_groups', 'queues', 'not_rendered'}.

    Every problem is collected and raised at once (PcsRenderError), before any request exists."""
    own = dict(launch_templates or {})
    problems = _name_problems(spec) + _foundation_problems(spec, foundation)
    size, found = _size(spec)
    problems += found
    ami, found = _ami_problems(spec, ami_id)
    problems += found
    problems += image_flavour_problems(spec, PCS_FLAVOUR, "the PCS agent registers each node with PCS")
    problems += _launch_template_problems(spec, launch_template, own)
    try:
        version, found = slurm_version(load_stack(stacks_dir(stacks), spec["image"]["stack"]))
    except StackError as exc:
        version, found = None, [f"image.stack: {exc}"]
    problems += found
    if problems:
        raise PcsRenderError(problems)
    return {
        "cluster": cluster_request(spec, foundation, str(version), str(size)),
        "node_groups": node_group_requests(spec, foundation, str(ami), launch_template, own, str(version)),
        "queues": queue_requests(spec),
        "not_rendered": not_rendered(spec, str(version)),
    }


# ---------------------------------------------------------------- validation against botocore's model


def request_problems(operation: str, request: Mapping[str, Any], model: Any = None) -> str:
    """Empty when `request` is valid input of the PCS `operation`; otherwise botocore's report, then the
    model's enum, pattern and maximum checks (module_utils/cluster/botocore_model.py). `model` is botocore's
    PCS service model (loaded when None)."""
    return botocore_model.request_problems(model or botocore_model.service_model("pcs"), operation, request)


def validate(requests: Mapping[str, Any], model: Any = None) -> None:
    """Check every rendered request against botocore's PCS model; PcsRequestError names the first failing."""
    model = model or botocore_model.service_model("pcs")
    labelled = [("CreateCluster", f"cluster {requests['cluster'].get('clusterName')}", requests["cluster"])]
    labelled += [
        ("CreateComputeNodeGroup", f"node group {group.get('computeNodeGroupName')}", group)
        for group in requests["node_groups"]
    ]
    labelled += [("CreateQueue", f"queue {queue.get('queueName')}", queue) for queue in requests["queues"]]
    for operation, label, request in labelled:
        report = request_problems(operation, request, model)
        if report:
            raise PcsRequestError(operation, label, report)
