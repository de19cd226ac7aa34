# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Render a normalised cluster spec (cluster/cluster_spec.py) as the Amazon EKS requests that make it.

Why a renderer beside pcluster_render.py, pcs_render.py and hyperpod_render.py: the same spec and foundation
record describe a Kubernetes cluster as well as a Slurm one. EKS runs the control plane; each spec queue
becomes one managed node group of its instance type booting our `eks-gpu` AMI (the image factory's
EKS-optimized accelerated AL2023 flavour) through an EC2 launch template that carries the AMI id and every
EFA interface the instance catalog gives the type. A node group of a custom AMI gets no user data from EKS,
so the template's user data is nodeadm's NodeConfig, which needs the cluster's endpoint and certificate
authority: node_user_data() renders it once the cluster exists.

The functions here are pure: data in, request data out, nothing sent. validate() checks every request
against botocore's models of the EKS and EC2 APIs (module_utils/cluster/botocore_model.py) before any is sent.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.catalog import instance_catalog
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import (
    botocore_model,
    launch_template,
    resilience,
    storage,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.errors import (
    RenderError,
    RequestError,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.stack.stack_matrix import StackError
from ansible_collections.trainstack.cluster.plugins.module_utils.stack.stack_resolver import (
    load_stack,
    stacks_dir,
)

# The eks-gpu image flavour starts from the EKS-optimized accelerated AL2023 AMI (docs/image-factory.md).
EKS_IMAGE_OS = "amzn-2023"
FOUNDATION_KEYS = (
    "subnet_public",
    "subnet_private",
    "control_plane_subnets",
    "security_group",
    "cluster_role",
    "node_role",
    "placement_group",
)
ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[\w+=,.@/-]+$")
SUBNET = re.compile(r"^subnet-[0-9a-f]{8,17}$")
AMI_ID = re.compile(r"^ami-[0-9a-f]{8,17}$")
CAPACITY_TYPE = {"on_demand": "ON_DEMAND", "spot": "SPOT", "capacity_block": "CAPACITY_BLOCK"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}
KUBELET_EFFECT = {
    "NO_SCHEDULE": "NoSchedule",
    "NO_EXECUTE": "NoExecute",
    "PREFER_NO_SCHEDULE": "PreferNoSchedule",
}
TEMPLATE_KIND = "eks"


class EksRenderError(RenderError):
    """The spec or the foundation asks for what EKS cannot make; one '<key>: <rule>' line per problem."""


class EksRequestError(RequestError):
    """A rendered request is not one botocore's model accepts; names the operation and the resource."""


# ---------------------------------------------------------------- checks before anything is rendered


def kubernetes_version(stack: Mapping[str, Any]) -> str | None:
    """The Kubernetes release the stack builds the eks-gpu image for (its `kubernetes` component), if any."""
    component = (stack.get("components") or {}).get("kubernetes") or {}
    version = str(component.get("version") or "")
    return version or None


def _foundation_problems(spec: Mapping[str, Any], foundation: Mapping[str, Any]) -> list[str]:
    found = [
        f"foundation.{key}: not a known key (known: {', '.join(FOUNDATION_KEYS)})"
        for key in sorted(set(foundation) - set(FOUNDATION_KEYS))
    ]
    for key, why in (
        ("cluster_role", "the role EKS's control plane runs as (CreateCluster roleArn)"),
        ("node_role", "the role every node runs as (CreateNodegroup nodeRole)"),
    ):
        if not ROLE_ARN.match(str(foundation.get(key) or "")):
            found.append(f"foundation.{key}: must be an IAM role ARN: {why}")
    if not foundation.get("security_group"):
        found.append(
            "foundation.security_group: is required: the control plane's interfaces and the nodes' (EFA) "
            "interfaces are in it"
        )
    if spec["network"]["vpc"] == "new":
        for key in ("subnet_public", "subnet_private"):
            if not foundation.get(key):
                found.append(
                    f"foundation.{key}: is required: network.vpc is new, so the foundation's subnets are used"
                )
    for index, subnet in enumerate(foundation.get("control_plane_subnets") or []):
        if not SUBNET.match(str(subnet)):
            found.append(f"foundation.control_plane_subnets[{index}]: {subnet!r} is not a subnet id")
    return found


def _image_problems(spec: Mapping[str, Any], ami_id: str | None) -> tuple[str | None, list[str]]:
    found = []
    if spec["image"]["os"] != EKS_IMAGE_OS:
        found.append(
            f"image.os: EKS nodes boot the eks-gpu image, built on the EKS-optimized accelerated AL2023 AMI; "
            f"set it to {EKS_IMAGE_OS} (got {spec['image']['os']})"
        )
    ami = ami_id or spec["image"].get("ami_id")
    if not ami:
        found.append(
            "image.tags: the AMI is found by its tags in AWS; look it up (amazon.aws.ec2_ami_info) and pass "
            "its id as ami_id"
        )
    elif not AMI_ID.match(ami):
        found.append(f"ami_id: {ami!r} is not an AMI id (ami- and 8 to 17 hex digits)")
    return ami, found


def _queue_problems(
    spec: Mapping[str, Any], foundation: Mapping[str, Any], catalog: instance_catalog.Catalog
) -> list[str]:
    found = []
    for index, queue in enumerate(spec["queues"]):
        if queue["placement_group"] and not foundation.get("placement_group"):
            found.append(
                f"queues[{index}].placement_group: is true but the foundation has no placement group "
                "(foundation.placement_group); make one with the foundation or set it to false"
            )
        name = launch_template.template_name(spec["name"], queue["name"], TEMPLATE_KIND)
        found += launch_template.name_problems(f"queues[{index}].name", name)
        if queue["efa"] and catalog.get(queue["instance_type"]).efa_interfaces < 1:
            found.append(f"queues[{index}].efa: {queue['instance_type']} has no EFA interface in the catalog")
    return found


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


def cluster_request(
    spec: Mapping[str, Any], foundation: Mapping[str, Any], version: str | None
) -> dict[str, Any]:
    """CreateCluster: the control plane's interfaces go into the cluster's subnets (EKS wants subnets of two
    availability zones; foundation.control_plane_subnets adds those of another zone)."""
    public, private = _subnets(spec, foundation)
    subnets = list(dict.fromkeys([private, public, *(foundation.get("control_plane_subnets") or [])]))
    request: dict[str, Any] = {
        "name": spec["name"],
        "roleArn": foundation["cluster_role"],
        "resourcesVpcConfig": {
            "subnetIds": subnets,
            "securityGroupIds": [foundation["security_group"]],
            "endpointPublicAccess": True,
            "endpointPrivateAccess": True,
        },
        "tags": _tags(spec),
    }
    if version:
        request["version"] = version
    return request


def node_labels(
    spec: Mapping[str, Any], queue: Mapping[str, Any], itype: instance_catalog.InstanceType
) -> dict:
    labels = {"trainstack.io/queue": queue["name"], "trainstack.io/stack": spec["image"]["stack"]}
    if (itype.gpu_count or 0) > 0:
        labels["nvidia.com/gpu.present"] = "true"
    if queue["efa"]:
        labels["vpc.amazonaws.com/efa.present"] = "true"
    return labels


def node_taints(itype: instance_catalog.InstanceType) -> list[dict[str, str]]:
    """GPU nodes repel pods that do not tolerate nvidia.com/gpu, so CPU pods never take a GPU node."""
    return [dict(GPU_TAINT)] if (itype.gpu_count or 0) > 0 else []


def template_requests(
    spec: Mapping[str, Any], foundation: Mapping[str, Any], ami: str, catalog: instance_catalog.Catalog
) -> list[dict[str, Any]]:
    """CreateLaunchTemplate per queue, without user data (node_user_data adds it once the cluster exists)."""
    found = []
    for queue in spec["queues"]:
        itype = catalog.get(queue["instance_type"])
        data = launch_template.template_data(
            queue,
            itype,
            ami=ami,
            security_group=foundation["security_group"],
            placement_group=foundation.get("placement_group"),
        )
        name = launch_template.template_name(spec["name"], queue["name"], TEMPLATE_KIND)
        # The node group's own tags do not reach its instances (EKS's model: "Tags don't propagate"); the
        # template's instance tags do, so the inventory finds the cluster's storage on every node (which
        # cluster a node is of, EKS writes itself: eks:cluster-name).
        found.append(launch_template.request(name, data, _tags(spec), instance_tags=storage.tags(spec)))
    return found


def node_group_requests(
    spec: Mapping[str, Any], foundation: Mapping[str, Any], catalog: instance_catalog.Catalog
) -> list[dict[str, Any]]:
    """CreateNodegroup per queue, in the compute subnet, on its launch template (named; the module pins the
    version EC2 answers with)."""
    private = _subnets(spec, foundation)[1]
    repair = resilience.eks_node_repair(resilience.of(spec))
    found = []
    for queue in spec["queues"]:
        itype = catalog.get(queue["instance_type"])
        request: dict[str, Any] = {
            "clusterName": spec["name"],
            "nodegroupName": queue["name"],
            "scalingConfig": {
                "minSize": queue["min_count"],
                "maxSize": queue["max_count"],
                "desiredSize": queue["min_count"],
            },
            "subnets": [private],
            "instanceTypes": [queue["instance_type"]],
            "nodeRole": foundation["node_role"],
            "labels": node_labels(spec, queue, itype),
            "launchTemplate": {
                "name": launch_template.template_name(spec["name"], queue["name"], TEMPLATE_KIND),
                "version": "1",
            },
            "capacityType": CAPACITY_TYPE[queue["capacity_type"]],
            "nodeRepairConfig": dict(repair),
            "tags": _tags(spec),
        }
        taints = node_taints(itype)
        if taints:
            request["taints"] = taints
        found.append(request)
    return found


def node_user_data(cluster: Mapping[str, Any], node_group: Mapping[str, Any]) -> str:
    """nodeadm's NodeConfig for a node of `node_group` joining `cluster` (DescribeCluster's answer), base64.

    The node group's labels and taints also go to the kubelet: a custom AMI's node registers with what its
    user data says."""
    authority = cluster.get("certificateAuthority") or {}
    authority = authority.get("data", "") if isinstance(authority, Mapping) else str(authority)
    cidr = (cluster.get("kubernetesNetworkConfig") or {}).get("serviceIpv4Cidr", "")
    labels = ",".join(f"{k}={v}" for k, v in sorted(node_group.get("labels", {}).items()))
    flags = [f"--node-labels={labels}"] if labels else []
    taints = [f"{t['key']}={t['value']}:{KUBELET_EFFECT[t['effect']]}" for t in node_group.get("taints", [])]
    if taints:
        flags.append(f"--register-with-taints={','.join(taints)}")
    lines = [
        "MIME-Version: 1.0",
        'Content-Type: multipart/mixed; boundary="//"',
        "",
        "--//",
        "Content-Type: application/node.eks.aws",
        "",
        "---",
        "apiVersion: node.eks.aws/v1alpha1",
        "kind: NodeConfig",
        "spec:",
        "  cluster:",
        f"    name: {cluster['name']}",
        f"    apiServerEndpoint: {cluster['endpoint']}",
        f"    certificateAuthority: {authority}",
        f"    cidr: {cidr}",
    ]
    if flags:
        lines += ["  kubelet:", "    flags:", *[f'      - "{flag}"' for flag in flags]]
    lines += ["", "--//--", ""]
    return base64.b64encode("\n".join(lines).encode()).decode()


def not_rendered(spec: Mapping[str, Any]) -> list[str]:
    """Keys of the spec no EKS request carries, each with where it goes instead (reported, not refused)."""
    found = [
        f"head_node.instance_type: EKS runs the control plane ({spec['head_node']['instance_type']} unused)"
    ]
    if spec.get("login_nodes"):
        found.append(
            "login_nodes: an EKS cluster is reached with kubectl through its endpoint, not login nodes"
        )
    storage = spec["shared_storage"]
    if storage.get("fsx_lustre"):
        found.append(
            "shared_storage.fsx_lustre: pods mount it through the FSx for Lustre CSI driver and a persistent "
            "volume claim (the PyTorchJob's fsx-claim), made in the cluster, not by EKS's API"
        )
    if storage.get("efs_home"):
        found.append("shared_storage.efs_home: a Kubernetes cluster has no shared /home")
    if spec["slurm_accounting"]:
        found.append("slurm_accounting: EKS runs no Slurm")
    if spec["monitoring"]:
        found.append(
            "monitoring: the exporters come with the eks-gpu image (dcgm); scraping is the cluster's"
        )
    return found + resilience.eks_not_rendered(resilience.of(spec))


def render(
    spec: Mapping[str, Any],
    foundation: Mapping[str, Any],
    ami_id: str | None = None,
    *,
    stacks: str | Path | None = None,
    catalog: instance_catalog.Catalog | None = None,
) -> dict[str, Any]:
    """The EKS requests of a normalised spec: {'cluster', 'launch_templates', 'node_groups', 'not_rendered'}.

    Every problem is collected and raised at once (EksRenderError), before any request exists."""
    catalog = catalog or instance_catalog.default()
    ami, problems = _image_problems(spec, ami_id)
    problems = _foundation_problems(spec, foundation) + problems
    if not problems:
        problems += _queue_problems(spec, foundation, catalog)
    version = None
    try:
        version = kubernetes_version(load_stack(stacks_dir(stacks), spec["image"]["stack"]))
    except StackError as exc:
        problems.append(f"image.stack: {exc}")
    if problems:
        raise EksRenderError(problems)
    return {
        "cluster": cluster_request(spec, foundation, version),
        "launch_templates": template_requests(spec, foundation, str(ami), catalog),
        "node_groups": node_group_requests(spec, foundation, catalog),
        "not_rendered": not_rendered(spec),
    }


# ---------------------------------------------------------------- validation against botocore's models


def validate(requests: Mapping[str, Any], models: Mapping[str, Any] | None = None) -> None:
    """Check every request against botocore's EKS and EC2 models; EksRequestError names the first failing."""
    models = dict(models or {})
    for service in ("eks", "ec2"):
        models.setdefault(service, botocore_model.service_model(service))
    labelled = [("eks", "CreateCluster", f"cluster {requests['cluster'].get('name')}", requests["cluster"])]
    labelled += [
        ("ec2", "CreateLaunchTemplate", f"launch template {t.get('LaunchTemplateName')}", t)
        for t in requests["launch_templates"]
    ]
    labelled += [
        ("eks", "CreateNodegroup", f"node group {g.get('nodegroupName')}", g) for g in requests["node_groups"]
    ]
    for service, operation, label, request in labelled:
        report = botocore_model.request_problems(models[service], operation, request)
        if report:
            raise EksRequestError(operation, label, report)
