#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module: an Amazon EKS cluster and one managed node group per spec queue, from a cluster spec.

Why a module of ours and not eks_cluster and eks_nodegroup of community.aws: those take the requests' fields
one by one, so the EFA interfaces, the launch template and its nodeadm user data (which needs the endpoint of
the cluster made a step before) would be spread over four tasks with nothing checking them against the spec
and the catalog together. Here module_utils/cluster/eks_render.py renders every request from the spec,
botocore's EKS and EC2 models check them all before the first call, and the module makes them in order
(cluster, launch templates, node groups), waiting for each; a second run with the same spec sends nothing."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: eks_cluster
short_description: Create or delete an Amazon EKS cluster and its GPU node groups from a cluster spec
description:
  - Checks the cluster spec exactly as M(trainstack.cluster.cluster_spec) does (O(path) or O(spec)), then
    renders the EKS requests, C(CreateCluster) (the Kubernetes version the image's stack names, the
    foundation's subnets and security group, O(foundation.cluster_role)), one EC2 C(CreateLaunchTemplate) per
    queue (our C(eks-gpu) AMI, one EFA interface per network card the instance catalog gives the type, the
    placement group and capacity reservation where the queue has them) and one C(CreateNodegroup) per queue
    (its instance type, counts and capacity type, GPU labels and the C(nvidia.com/gpu) taint).
  - Every rendered request is validated against botocore's EKS and EC2 models before any call; a refused
    request or a spec EKS cannot take fails the module naming the key or the operation, and changes nothing.
  - With O(state=present), creates what does not exist yet (found by name) and waits until it is C(ACTIVE);
    an existing cluster, launch template or node group is left as it is (differences are warned about). With
    O(state=absent), deletes the node groups, then the cluster, then the launch templates, waiting for each.
version_added: 0.2.0
author: trainstack maintainers (@trainstack)
options:
  state:
    description: C(present) creates what is missing; C(absent) deletes node groups, cluster, launch templates.
    type: str
    choices: [present, absent]
    default: present
  foundation:
    description: What the cluster is made in (C(playbooks/eks_cluster.yml) maps the foundation's record).
    type: dict
    suboptions:
      subnet_public:
        description: Public subnet (required when C(network.vpc=new)); the control plane's second subnet.
        type: str
      subnet_private:
        description: Subnet of the nodes (required when C(network.vpc=new)).
        type: str
      control_plane_subnets:
        description: More subnets for the control plane (EKS wants subnets in two availability zones).
        type: list
        elements: str
      security_group:
        description: Security group of the control plane and of the nodes' EFA interfaces (required).
        type: str
      cluster_role:
        description: IAM role ARN the control plane runs as (trusts C(eks.amazonaws.com)); required.
        type: str
      node_role:
        description: IAM role ARN of the nodes (trusts C(ec2.amazonaws.com)); required.
        type: str
      placement_group:
        description: Cluster placement group of the queues with C(placement_group).
        type: str
  ami_id:
    description: The C(eks-gpu) AMI, where the spec finds it by C(image.tags).
    type: str
extends_documentation_fragment:
  - trainstack.cluster.cluster_module
  - trainstack.cluster.cluster_module.wait
  - amazon.aws.common.modules
  - amazon.aws.region.modules
  - amazon.aws.boto3
notes:
  - Left out, O(poll_interval) is 30 seconds (a cluster takes about ten minutes, a node group a few).
  - With O(wait=false), the module still waits for the cluster to be C(ACTIVE) (the launch templates carry its
    endpoint) and, with O(state=absent), for the node groups to be gone (EKS deletes no cluster that has any).
  - Kubernetes objects (the NVIDIA device plugin, the EFA device plugin, the FSx CSI driver, the Kubeflow
    training operator) are not made here; they need the cluster's API server.
seealso:
  - module: trainstack.cluster.cluster_spec
  - module: trainstack.cluster.batch_cluster
"""

EXAMPLES = r"""
- name: Render and check the EKS requests of a spec, without AWS
  trainstack.cluster.eks_cluster:
    path: inventories/aws/eks/train-eks.yml
    render_only: true
    foundation:
      subnet_public: subnet-0a0a0a0a0a0a0a0a0
      subnet_private: subnet-0b0b0b0b0b0b0b0b0
      security_group: sg-0c0c0c0c0c0c0c0c0
      cluster_role: arn:aws:iam::123456789012:role/trainstack-train-eks-cluster
      node_role: arn:aws:iam::123456789012:role/trainstack-train-eks-node
    ami_id: ami-0d0d0d0d0d0d0d0d0

- name: Delete the node groups, the cluster and the launch templates
  trainstack.cluster.eks_cluster:
    path: inventories/aws/eks/train-eks.yml
    state: absent
"""

RETURN = r"""
requests:
  description: The rendered C(cluster), C(launch_templates) (without user data) and C(node_groups) requests.
  returned: with O(state=present)
  type: dict
not_rendered:
  description: Keys of the spec no EKS request carries, each with where it is handled instead.
  returned: with O(state=present)
  type: list
  elements: str
cluster:
  description: C(name), C(arn), C(endpoint), C(status) and C(version) of the cluster; empty when none.
  returned: unless O(render_only)
  type: dict
created:
  description: What was created (or would be, in check mode), as C(cluster <name>), C(launch template <name>)
    and C(node group <name>).
  returned: always
  type: list
  elements: str
deleted:
  description: What was deleted (or would be, in check mode), in the order of deletion.
  returned: always
  type: list
  elements: str
progress:
  description: C(<seconds>s <resource> <status>) each time a waited-for resource changed status.
  returned: unless O(render_only)
  type: list
  elements: str
"""

from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.aws.client import client, reported
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.drift import drift, warn
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.errors import or_none
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.wait import GONE, Waiter
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import (
    botocore_model,
    launch_template,
    spec_module,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.eks_render import (
    TEMPLATE_KIND,
    EksRenderError,
    EksRequestError,
    node_user_data,
    render,
    validate,
)

POLL_SECONDS = 30
FAILED = ("FAILED", "CREATE_FAILED", "DELETE_FAILED", "DEGRADED")
# What of an existing cluster or node group is compared with the request (and warned about, never changed).
DRIFT_KEYS = ("version", "scalingConfig", "instanceTypes", "capacityType", "labels", "taints")
HINT = (
    "EKS goes on; run the same task again to wait once more, or watch it with aws eks describe-cluster / "
    "describe-nodegroup"
)


def describe_cluster(eks: Any, name: str) -> dict[str, Any] | None:
    return or_none(eks, lambda: eks.describe_cluster(name=name)["cluster"])


def describe_node_group(eks: Any, cluster: str, name: str) -> dict[str, Any] | None:
    return or_none(eks, lambda: eks.describe_nodegroup(clusterName=cluster, nodegroupName=name)["nodegroup"])


def node_group_names(eks: Any, cluster: str) -> list[str]:
    names: list[str] = []
    for page in eks.get_paginator("list_nodegroups").paginate(clusterName=cluster):
        names += page.get("nodegroups", [])
    return sorted(names)


def describe_template(ec2: Any, name: str) -> dict[str, Any] | None:
    found = or_none(ec2, lambda: ec2.describe_launch_templates(LaunchTemplateNames=[name])["LaunchTemplates"])
    return found[0] if found else None


def _issues(item: dict[str, Any]) -> str:
    return str((item.get("health") or {}).get("issues") or "-")


def _until(waiter: Waiter, what: str, look: Any, wanted: str) -> dict[str, Any] | None:
    """A cluster or node group until ``wanted``; a failed or degraded one ends the wait with its issues."""
    return waiter.until(what, look, wanted, failed=FAILED, reason=_issues)


def _summary(cluster: dict[str, Any] | None) -> dict[str, Any]:
    if not cluster:
        return {}
    return {key: cluster.get(key, "") for key in ("name", "arn", "endpoint", "status", "version")}


def _templates(module: Any, ec2: Any, requests: dict, cluster: dict, created: list[str]) -> dict[str, str]:
    """Make the missing launch templates with this cluster's nodeadm user data; their versions by name."""
    versions = {}
    for template, group in zip(requests["launch_templates"], requests["node_groups"], strict=True):
        name = template["LaunchTemplateName"]
        found = describe_template(ec2, name)
        if found is None:
            data = {**template["LaunchTemplateData"], "UserData": node_user_data(cluster, group)}
            request = {**template, "LaunchTemplateData": data}
            report = botocore_model.request_problems(
                botocore_model.service_model("ec2"), "CreateLaunchTemplate", request
            )
            if report:
                module.fail_json(
                    msg=f"CreateLaunchTemplate ({name}) does not match botocore's model: {report}"
                )
            found = ec2.create_launch_template(**request)["LaunchTemplate"]
            created.append(f"launch template {name}")
        versions[name] = str(found["DefaultVersionNumber"])
    return versions


def present(module: Any, eks: Any, ec2: Any, requests: dict[str, Any], waiter: Waiter) -> dict[str, Any]:
    name = requests["cluster"]["name"]
    created: list[str] = []
    cluster = describe_cluster(eks, name)
    if module.check_mode:
        existing = set(node_group_names(eks, name)) if cluster else set()
        created += [] if cluster else [f"cluster {name}"]
        created += [
            f"launch template {t['LaunchTemplateName']}"
            for t in requests["launch_templates"]
            if describe_template(ec2, t["LaunchTemplateName"]) is None
        ]
        created += [
            f"node group {g['nodegroupName']}"
            for g in requests["node_groups"]
            if g["nodegroupName"] not in existing
        ]
        return {"changed": bool(created), "created": created, "cluster": _summary(cluster), "progress": []}
    if cluster is None:
        eks.create_cluster(**requests["cluster"])
        created.append(f"cluster {name}")
    else:
        warn(module, f"EKS cluster {name}", drift(cluster, requests["cluster"], DRIFT_KEYS))
    # Waited for even without O(wait): the launch templates' user data carries the cluster's endpoint.
    cluster = _until(waiter, f"cluster {name}", lambda: describe_cluster(eks, name), "ACTIVE")
    versions = _templates(module, ec2, requests, cluster, created)
    for request in requests["node_groups"]:
        group = request["nodegroupName"]
        seen = describe_node_group(eks, name, group)
        if seen is None:
            template = request["launchTemplate"]
            eks.create_nodegroup(
                **{**request, "launchTemplate": {**template, "version": versions[template["name"]]}}
            )
            created.append(f"node group {group}")
        else:
            warn(module, f"EKS node group {group}", drift(seen, request, DRIFT_KEYS))
    for request in requests["node_groups"] if module.params["wait"] else []:
        group = request["nodegroupName"]
        _until(waiter, f"node group {group}", lambda g=group: describe_node_group(eks, name, g), "ACTIVE")
    return {
        "changed": bool(created),
        "created": created,
        "cluster": _summary(cluster),
        "progress": waiter.progress,
    }


def absent(
    module: Any, eks: Any, ec2: Any, name: str, templates: list[str], waiter: Waiter
) -> dict[str, Any]:
    """Node groups first (EKS refuses to delete a cluster that has any), the cluster, then our templates."""
    cluster = describe_cluster(eks, name)
    groups = node_group_names(eks, name) if cluster else []
    left = [t for t in templates if describe_template(ec2, t) is not None]
    deleted = [f"node group {g}" for g in groups] + ([f"cluster {name}"] if cluster else [])
    deleted += [f"launch template {t}" for t in left]
    if module.check_mode or not deleted:
        return {"changed": bool(deleted), "deleted": deleted, "cluster": _summary(cluster), "progress": []}
    for group in groups:
        eks.delete_nodegroup(clusterName=name, nodegroupName=group)
    for group in groups:
        _until(waiter, f"node group {group}", lambda g=group: describe_node_group(eks, name, g), GONE)
    if cluster:
        eks.delete_cluster(name=name)
        if module.params["wait"]:
            _until(waiter, f"cluster {name}", lambda: describe_cluster(eks, name), GONE)
    for template in left:
        ec2.delete_launch_template(LaunchTemplateName=template)
    return {"changed": True, "deleted": deleted, "cluster": {}, "progress": waiter.progress}


_FOUNDATION = {
    "subnet_public": {"type": "str"},
    "subnet_private": {"type": "str"},
    "control_plane_subnets": {"type": "list", "elements": "str"},
    "security_group": {"type": "str"},
    "cluster_role": {"type": "str"},
    "node_role": {"type": "str"},
    "placement_group": {"type": "str"},
}


def argument_spec() -> dict[str, Any]:
    return spec_module.argument_spec(
        {"foundation": {"type": "dict", "options": _FOUNDATION}, "ami_id": {"type": "str"}}
    )


def _requests(module: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Render and validate; any problem fails the module before a client exists."""
    params = module.params

    def make() -> dict[str, Any]:
        requests = render(spec, spec_module.foundation(module), params["ami_id"], stacks=params["stacks_dir"])
        validate(requests)
        return requests

    return spec_module.rendered(module, "EKS", (EksRenderError, EksRequestError), make)


def main() -> None:
    module, spec = spec_module.cluster_module("eks_cluster", argument_spec(), ("foundation",))
    params = module.params
    result: dict[str, Any] = {"changed": False, "created": [], "deleted": []}
    templates = [
        launch_template.template_name(spec["name"], queue["name"], TEMPLATE_KIND) for queue in spec["queues"]
    ]
    if params["state"] == "present":
        requests = _requests(module, spec)
        spec_module.keep_rendered(module, result, requests, "EKS")
    eks = client(module, "eks", spec["region"])
    ec2 = client(module, "ec2", spec["region"])
    waiter = Waiter.of_module(module, "EKS", POLL_SECONDS, HINT)
    with reported(module, f"EKS cluster {spec['name']}"):
        if params["state"] == "present":
            result.update(present(module, eks, ec2, result["requests"], waiter))
        else:
            result.update(absent(module, eks, ec2, spec["name"], templates, waiter))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
