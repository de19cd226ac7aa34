#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module: a SageMaker HyperPod cluster (Slurm) from a cluster spec.

Why a module of ours: amazon.aws and community.aws have no HyperPod module, and a cluster is one SageMaker
resource that takes long to turn InService, is scaled by sending its instance groups again, and must be
waited for on delete. The request comes from module_utils/cluster/hyperpod_render.py and is checked against
botocore's SageMaker model and HyperPod's rules before it is sent, so a spec HyperPod cannot take changes
nothing.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hyperpod_cluster
short_description: Create, scale or delete a SageMaker HyperPod (Slurm) cluster from a cluster spec
description:
  - Checks the cluster spec exactly as M(trainstack.cluster.cluster_spec) does (O(path) or O(spec)),
    then renders the SageMaker C(CreateCluster) request, a C(controller) instance group of one node
    (C(head_node)), a C(login) group (C(login_nodes)) and one worker group per queue (its C(max_count)
    nodes), each running C(on_create.sh) from O(foundation.lifecycle_s3_uri) as
    O(foundation.execution_role), and HyperPod's C(provisioning_parameters.json) for the lifecycle bundle.
  - Refuses, naming the key and the rule and before any call, what HyperPod cannot take, for example a
    missing execution role or lifecycle prefix, an instance type HyperPod does not offer (its C(ml.) name is
    not in the SageMaker model's C(ClusterInstanceType)), a group name HyperPod refuses, Spot queues and EC2
    capacity reservations. The request is validated against botocore's SageMaker model (required members,
    types, enums, patterns, lengths and ranges).
  - With O(state=present), creates the cluster when there is none and waits for C(InService); an existing
    cluster whose instance groups have the spec's counts is left alone; a different count (or a new queue)
    is sent as C(UpdateCluster) with the rendered instance groups. Other differences are reported as
    warnings.
  - The cluster's munge key lives in an SSM SecureString parameter, C(/trainstack/hyperpod/<name>/munge-key),
    which C(provisioning_parameters.json) names for the lifecycle script; nodes read it with the execution
    role. With O(state=present) the module writes it, 1024 random bytes in base64, when it is missing (an
    existing key is kept, as a new one would lock the running nodes out); with O(state=absent) it deletes it
    after the cluster. The key never appears in the module's result or log.
  - With O(state=absent), deletes the cluster and waits until it is gone.
version_added: 0.2.0
author: trainstack maintainers (@trainstack)
options:
  state:
    description: C(present) creates or scales the cluster; C(absent) deletes it.
    type: str
    choices: [present, absent]
    default: present
  foundation:
    description: Where the cluster is made. Required with O(state=present).
    type: dict
    suboptions:
      subnet_private:
        description: Subnet of the nodes (required when C(network.vpc=new); else the spec's private subnet).
        type: str
      security_group:
        description: Security group of the nodes (VpcConfig).
        type: str
      execution_role:
        description: ARN of the IAM role every instance group runs as; SageMaker must be allowed to assume it.
        type: str
      lifecycle_s3_uri:
        description:
          - The S3 prefix holding C(on_create.sh), C(provisioning_parameters.json) and the node bundle. Its
            bucket's name must start with C(sagemaker-).
        type: str
      fsx_dns_name:
        description: DNS name of the FSx for Lustre file system (required with C(shared_storage.fsx_lustre)).
        type: str
      fsx_mount_name:
        description: Mount name of that file system.
        type: str
  slurm_config:
    description:
      - How the Slurm topology reaches the nodes. C(provisioning_parameters) puts it in
        C(provisioning_parameters.json) of the lifecycle prefix (no C(Orchestrator) in the request). C(api)
        sends C(Orchestrator.Slurm) and each group's C(SlurmConfig) instead (the prefix must then hold no
        C(provisioning_parameters.json); HyperPod refuses both at once).
    type: str
    choices: [provisioning_parameters, api]
    default: provisioning_parameters
extends_documentation_fragment:
  - trainstack.cluster.cluster_module
  - trainstack.cluster.cluster_module.wait
  - amazon.aws.common.modules
  - amazon.aws.region.modules
  - amazon.aws.boto3
notes:
  - Left out, O(poll_interval) is 30 seconds (a cluster takes tens of minutes to turn C(InService)).
  - With O(wait=false), a cluster that is not C(InService) is still waited for before it is scaled (SageMaker
    updates no cluster that is changing already).
  - moto implements C(CreateCluster), C(DescribeCluster) and C(DeleteCluster) but not C(UpdateCluster); the
    scale request is checked against botocore's model in the unit tests.
seealso:
  - module: trainstack.cluster.cluster_spec
  - module: trainstack.cluster.pcs_cluster
"""

EXAMPLES = r"""
- name: Render and check the HyperPod request of a spec, without AWS
  trainstack.cluster.hyperpod_cluster:
    path: inventories/aws/hyperpod/train-hp.yml
    render_only: true
    foundation:
      subnet_private: subnet-0b0b0b0b0b0b0b0b0
      security_group: sg-0c0c0c0c0c0c0c0c0
      execution_role: arn:aws:iam::123456789012:role/trainstack-train-hp-hyperpod
      lifecycle_s3_uri: s3://sagemaker-trainstack-train-hp/hyperpod/train-hp
      fsx_dns_name: fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com
      fsx_mount_name: abcdefgh

- name: Delete the cluster
  trainstack.cluster.hyperpod_cluster:
    path: inventories/aws/hyperpod/train-hp.yml
    state: absent
"""

RETURN = r"""
request:
  description: The rendered C(CreateCluster) request, as boto3 sends it.
  returned: with O(state=present)
  type: dict
provisioning_parameters:
  description:
    - HyperPod's C(provisioning_parameters.json) for the lifecycle prefix; null with O(slurm_config=api).
  returned: with O(state=present)
  type: dict
not_rendered:
  description: Keys of the spec no HyperPod request carries, each with why.
  returned: with O(state=present)
  type: list
  elements: str
cluster_arn:
  description: ARN of the cluster; empty when there is none.
  returned: unless O(render_only)
  type: str
status:
  description: The cluster's last seen status (C(InService), C(Creating), ...); empty when there is none.
  returned: unless O(render_only)
  type: str
action:
  description: What was done (or would be, in check mode), C(create), C(update), C(delete) or C(none).
  returned: unless O(render_only)
  type: str
scaled:
  description: Instance groups whose count changed (or that were added), by name, as C(old -> new).
  returned: with O(state=present), unless O(render_only)
  type: dict
munge_key:
  description:
    - The SSM parameter of the cluster's munge key (C(parameter), its name) and what was done to it
      (C(action), C(create), C(delete) or C(none)); never the key.
  returned: unless O(render_only)
  type: dict
progress:
  description: The statuses seen while waiting, as C(<seconds>s <status>).
  returned: unless O(render_only)
  type: list
  elements: str
"""

import base64
import os
from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.aws.client import client, reported
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.drift import drift, warn
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.errors import or_none
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.wait import GONE, Waiter
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import spec_module
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.hyperpod_render import (
    HyperPodRenderError,
    HyperPodRequestError,
    munge_key_parameter,
    render,
    validate,
)

POLL_SECONDS = 30
FAILED = ("Failed", "RollingBack")
# munged takes keys of 32 bytes to 1 MiB; 1024 random bytes is what the lab's and ParallelCluster's keys are.
MUNGE_KEY_BYTES = 1024


def munge_key_exists(ssm: Any, name: str) -> bool:
    """Whether the parameter exists, asked without reading it: DescribeParameters returns no value."""
    found = ssm.describe_parameters(ParameterFilters=[{"Key": "Name", "Option": "Equals", "Values": [name]}])
    return bool(found["Parameters"])


def ensure_munge_key(module: Any, ssm: Any, cluster: str) -> dict[str, str]:
    """Write the cluster's munge key when it has none; an existing key is kept, never rotated (the running
    nodes hold it). The key goes from os.urandom to SSM and nowhere else: not into the result, not the log."""
    name = munge_key_parameter(cluster)
    if munge_key_exists(ssm, name):
        return {"parameter": name, "action": "none"}
    if not module.check_mode:
        ssm.put_parameter(
            Name=name,
            Description=f"munge key of SageMaker HyperPod cluster {cluster} (trainstack)",
            Value=base64.b64encode(os.urandom(MUNGE_KEY_BYTES)).decode("ascii"),
            Type="SecureString",
            Tags=[{"Key": "trainstack:cluster", "Value": cluster}],
        )
    return {"parameter": name, "action": "create"}


def remove_munge_key(module: Any, ssm: Any, cluster: str) -> dict[str, str]:
    """Delete the cluster's munge key: it must not outlive the cluster."""
    name = munge_key_parameter(cluster)
    if not munge_key_exists(ssm, name):
        return {"parameter": name, "action": "none"}
    if not module.check_mode:
        ssm.delete_parameter(Name=name)
    return {"parameter": name, "action": "delete"}


def describe(sagemaker: Any, name: str) -> dict[str, Any] | None:
    return or_none(sagemaker, lambda: sagemaker.describe_cluster(ClusterName=name))


def hint(name: str, state: str) -> str:
    """What a user whose wait ran out can do: SageMaker goes on."""
    return (
        f"SageMaker goes on; run the same task again (state={state}) to wait for it once more, or watch it "
        f"with: aws sagemaker describe-cluster --cluster-name {name}"
    )


def _status(cluster: dict[str, Any] | None) -> str:
    return cluster["ClusterStatus"] if cluster else GONE


def _seen(waiter: Waiter, cluster: dict[str, Any] | None) -> str:
    """Keep the cluster's status in the progress (one cluster: the lines name no resource)."""
    waiter.seen("", _status(cluster))
    return _status(cluster)


def _until(waiter: Waiter, sagemaker: Any, name: str, wanted: str) -> dict[str, Any] | None:
    """The cluster until InService (a failed or rolled-back one ends it) or gone (a failed delete ends it)."""
    return waiter.until(
        f"cluster {name}",
        lambda: describe(sagemaker, name),
        wanted,
        status=_status,
        failed=FAILED if wanted != GONE else ("Failed",),
        reason=lambda cluster: cluster.get("FailureMessage") or "-",
        progress_as="",
    )


def _current_counts(cluster: dict[str, Any]) -> dict[str, int]:
    """The count each existing group is going to: TargetCount while it changes, else CurrentCount."""
    return {
        group["InstanceGroupName"]: int(group.get("TargetCount", group.get("CurrentCount", 0)))
        for group in cluster.get("InstanceGroups", [])
    }


def _drift(module: Any, cluster: dict[str, Any], request: dict[str, Any]) -> None:
    """Report, never change, what UpdateCluster would not change by a count: types and left-over groups."""
    what = f"HyperPod cluster {request['ClusterName']}"
    have = {group["InstanceGroupName"]: group for group in cluster.get("InstanceGroups", [])}
    wanted = {group["InstanceGroupName"]: group for group in request["InstanceGroups"]}
    types = {
        f"group {name}'s instance type": group.get("InstanceType")
        for name, group in have.items()
        if group.get("InstanceType") is not None
    }
    asked = {f"group {name}'s instance type": group["InstanceType"] for name, group in sorted(wanted.items())}
    warn(module, what, drift(types, asked), "a group's type cannot change, left as it is")
    for name in sorted(set(have) - set(wanted)):
        module.warn(f"{what}: group {name} is not in the spec; left as it is")


def _scale(cluster: dict[str, Any], request: dict[str, Any]) -> dict[str, str]:
    counts = _current_counts(cluster)
    return {
        group[
            "InstanceGroupName"
        ]: f"{counts.get(group['InstanceGroupName'], 'absent')} -> {group['InstanceCount']}"
        for group in request["InstanceGroups"]
        if counts.get(group["InstanceGroupName"]) != group["InstanceCount"]
    }


def update_request(request: dict[str, Any]) -> dict[str, Any]:
    """UpdateCluster takes the cluster's name and its instance groups as CreateCluster has them."""
    found = {"ClusterName": request["ClusterName"], "InstanceGroups": request["InstanceGroups"]}
    if "Orchestrator" in request:
        found["Orchestrator"] = request["Orchestrator"]
    return found


def present(module: Any, sagemaker: Any, request: dict[str, Any], waiter: Waiter) -> dict[str, Any]:
    name = request["ClusterName"]
    cluster = describe(sagemaker, name)
    result: dict[str, Any] = {"action": "none", "scaled": {}, "progress": waiter.progress}
    if cluster is None:
        result.update(action="create", changed=True, cluster_arn="", status="")
        if module.check_mode:
            return result
        result["cluster_arn"] = sagemaker.create_cluster(**request)["ClusterArn"]
    else:
        _drift(module, cluster, request)
        scaled = _scale(cluster, request)
        result.update(cluster_arn=cluster["ClusterArn"], status=cluster["ClusterStatus"], scaled=scaled)
        if scaled:
            result.update(action="update", changed=True)
            if module.check_mode:
                return result
            if cluster["ClusterStatus"] != "InService":  # even without O(wait): SageMaker refuses the update
                cluster = _until(waiter, sagemaker, name, "InService")
            updated = update_request(request)
            validate("UpdateCluster", updated)
            sagemaker.update_cluster(**updated)
        else:
            result["changed"] = False
            if module.check_mode or not module.params["wait"] or cluster["ClusterStatus"] == "InService":
                _seen(waiter, cluster)
                return result
    if module.params["wait"]:
        result["status"] = _until(waiter, sagemaker, name, "InService")["ClusterStatus"]
    return result


def absent(module: Any, sagemaker: Any, name: str, waiter: Waiter) -> dict[str, Any]:
    cluster = describe(sagemaker, name)
    if cluster is None:
        return {"changed": False, "action": "none", "cluster_arn": "", "status": "", "progress": []}
    result = {
        "changed": True,
        "action": "delete",
        "cluster_arn": cluster["ClusterArn"],
        "status": _seen(waiter, cluster),
        "progress": waiter.progress,
    }
    if module.check_mode:
        return result
    if cluster["ClusterStatus"] != "Deleting":
        sagemaker.delete_cluster(ClusterName=name)
    if module.params["wait"]:
        _until(waiter, sagemaker, name, GONE)
        result["status"] = ""
    return result


_FOUNDATION = {
    "subnet_private": {"type": "str"},
    "security_group": {"type": "str"},
    "execution_role": {"type": "str"},
    "lifecycle_s3_uri": {"type": "str"},
    "fsx_dns_name": {"type": "str"},
    "fsx_mount_name": {"type": "str"},
}


def argument_spec() -> dict[str, Any]:
    return spec_module.argument_spec(
        {
            "foundation": {"type": "dict", "options": _FOUNDATION},
            "slurm_config": {
                "type": "str",
                "choices": ["provisioning_parameters", "api"],
                "default": "provisioning_parameters",
            },
        }
    )


def _rendered(module: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Render and validate; any problem fails the module before a client exists."""

    def make() -> dict[str, Any]:
        rendered = render(spec, spec_module.foundation(module), module.params["slurm_config"])
        validate("CreateCluster", rendered["cluster"])
        return rendered

    return spec_module.rendered(module, "HyperPod", (HyperPodRenderError, HyperPodRequestError), make)


def main() -> None:
    module, spec = spec_module.cluster_module("hyperpod_cluster", argument_spec(), ("foundation",))
    params = module.params
    result: dict[str, Any] = {"changed": False}
    if params["state"] == "present":
        rendered = _rendered(module, spec)
        result.update(
            request=rendered["cluster"],
            provisioning_parameters=rendered["provisioning_parameters"],
            not_rendered=rendered["not_rendered"],
        )
        for line in rendered["not_rendered"]:
            module.warn(f"not in the HyperPod request: {line}")
        if params["render_only"]:
            module.exit_json(**result)
    sagemaker = client(module, "sagemaker", spec["region"])
    ssm = client(module, "ssm", spec["region"])
    waiter = Waiter.of_module(module, "HyperPod", POLL_SECONDS, hint(spec["name"], params["state"]))
    with reported(module, f"HyperPod cluster {spec['name']}"):
        try:
            if params["state"] == "present":
                # Before the cluster: its first nodes read the key as soon as they boot.
                key = ensure_munge_key(module, ssm, spec["name"])
                result.update(present(module, sagemaker, result["request"], waiter))
            else:
                result.update(absent(module, sagemaker, spec["name"], waiter))
                key = remove_munge_key(module, ssm, spec["name"])
        except HyperPodRequestError as exc:
            module.fail_json(msg=str(exc), operation=exc.operation)
    result["munge_key"] = key
    result["changed"] = result["changed"] or key["action"] != "none"
    module.exit_json(**result)


if __name__ == "__main__":
    main()
