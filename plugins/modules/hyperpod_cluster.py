#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module: a SageMaker HyperPod cluster (Slurm) from a cluster spec.

Why a module of ours: amazon.aws and community.aws have no HyperPod module, and a cluster is one SageMaker
resource that takes long to turn InService, is scaled by sending its instance groups again, and must be
waited for on delete. The request comes from module_utils/hyperpod_render.py and is checked against botocore's
SageMaker model and HyperPod's rules before it is sent, so a spec HyperPod cannot take changes nothing.
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
  - With O(state=absent), deletes the cluster and waits until it is gone.
  - With O(render_only=true), renders and validates only; nothing is read from or sent to AWS.
  - The cluster is made in the spec's C(region).
version_added: 0.2.0
author: trainstack maintainers (@trainstack)
options:
  state:
    description: C(present) creates or scales the cluster; C(absent) deletes it.
    type: str
    choices: [present, absent]
    default: present
  path:
    description: The spec file; give this or O(spec).
    type: path
  spec:
    description: A spec as a mapping (for example C(cluster_spec)'s returned C(spec)); checked again.
    type: dict
  stacks_dir:
    description: The directory of the stack files the spec's C(image.stack) names (default the collection's).
    type: path
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
  render_only:
    description: Render and validate; call no AWS API.
    type: bool
    default: false
  wait:
    description: Wait for C(InService) (or, with O(state=absent), until the cluster is gone).
    type: bool
    default: true
  wait_timeout:
    description: Seconds to wait, more than 0.
    type: int
    default: 3600
  poll_interval:
    description: Seconds between two looks at the cluster's status while waiting, more than 0.
    type: int
    default: 30
extends_documentation_fragment:
  - amazon.aws.common.modules
  - amazon.aws.region.modules
  - amazon.aws.boto3
notes:
  - Supports check mode; it reads the cluster and reports what it would create, scale or delete.
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
progress:
  description: The statuses seen while waiting, as C(<seconds>s <status>).
  returned: unless O(render_only)
  type: list
  elements: str
"""

import time
from typing import Any

try:
    from ansible_collections.amazon.aws.plugins.module_utils.modules import AnsibleAWSModule
except ImportError:  # pragma: no cover - amazon.aws is a dependency of this collection
    AnsibleAWSModule = None

try:
    import botocore
except ImportError:  # pragma: no cover - AnsibleAWSModule reports a missing botocore itself
    botocore = None

from ansible_collections.trainstack.cluster.plugins.module_utils.hyperpod_render import (
    HyperPodRenderError,
    HyperPodRequestError,
    render,
    validate,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.spec_module import (
    check_run_params,
    load_spec,
)

FAILED = ("Failed", "RollingBack")


def _not_found(error: Exception) -> bool:
    """SageMaker answers ResourceNotFound for a missing cluster, moto ValidationException 'Could not find'."""
    if not isinstance(error, botocore.exceptions.ClientError):
        return False
    detail = error.response.get("Error", {})
    return detail.get("Code") == "ResourceNotFound" or (
        detail.get("Code") == "ValidationException" and "Could not find" in str(detail.get("Message"))
    )


def describe(client: Any, name: str) -> dict[str, Any] | None:
    try:
        return client.describe_cluster(ClusterName=name)
    except botocore.exceptions.ClientError as error:
        if _not_found(error):
            return None
        raise


class Waiter:
    """Polls one cluster until a wanted state; keeps the statuses it saw, for the result and a timeout."""

    def __init__(self, module: Any, client: Any, name: str) -> None:
        self.module, self.client, self.name = module, client, name
        self.start = time.monotonic()
        self.progress: list[str] = []

    def seen(self, cluster: dict[str, Any] | None) -> str:
        status = cluster["ClusterStatus"] if cluster else "gone"
        line = f"{int(time.monotonic() - self.start)}s {status}"
        if not self.progress or self.progress[-1].split(" ", 1)[1] != status:
            self.progress.append(line)
        return status

    def timed_out(self, status: str, wanted: str, state: str) -> None:
        seconds = self.module.params["wait_timeout"]
        self.module.fail_json(
            msg=(
                f"HyperPod cluster {self.name}: still {status} after {seconds} s (wait_timeout), "
                f"not {wanted}. "
                f"SageMaker goes on; run the same task again (state={state}) to wait for it once more, or "
                f"watch it with: aws sagemaker describe-cluster --cluster-name {self.name}"
            ),
            status=status,
            progress=self.progress,
        )

    def until_in_service(self) -> dict[str, Any]:
        while True:
            cluster = describe(self.client, self.name)
            status = self.seen(cluster)
            if cluster is None:
                self.module.fail_json(msg=f"HyperPod cluster {self.name}: gone while waiting for InService")
            if status in FAILED:
                self.module.fail_json(
                    msg=f"HyperPod cluster {self.name} is {status}: {cluster.get('FailureMessage') or '-'}",
                    status=status,
                    progress=self.progress,
                )
            if status == "InService":
                return cluster
            self.sleep(status, "InService", "present")

    def until_gone(self) -> None:
        while True:
            cluster = describe(self.client, self.name)
            status = self.seen(cluster)
            if cluster is None:
                return
            if status == "Failed":
                self.module.fail_json(
                    msg=f"HyperPod cluster {self.name} failed to delete: {cluster.get('FailureMessage')}",
                    status=status,
                    progress=self.progress,
                )
            self.sleep(status, "deleted", "absent")

    def sleep(self, status: str, wanted: str, state: str) -> None:
        if time.monotonic() - self.start >= self.module.params["wait_timeout"]:
            self.timed_out(status, wanted, state)
        time.sleep(self.module.params["poll_interval"])


def _current_counts(cluster: dict[str, Any]) -> dict[str, int]:
    """The count each existing group is going to: TargetCount while it changes, else CurrentCount."""
    return {
        group["InstanceGroupName"]: int(group.get("TargetCount", group.get("CurrentCount", 0)))
        for group in cluster.get("InstanceGroups", [])
    }


def _drift(module: Any, cluster: dict[str, Any], request: dict[str, Any]) -> None:
    """Report, never change, what UpdateCluster would not change by a count: types and left-over groups."""
    have = {group["InstanceGroupName"]: group for group in cluster.get("InstanceGroups", [])}
    wanted = {group["InstanceGroupName"]: group for group in request["InstanceGroups"]}
    for name, group in sorted(wanted.items()):
        if name in have and have[name].get("InstanceType") not in (None, group["InstanceType"]):
            module.warn(
                f"HyperPod cluster {request['ClusterName']}: group {name} runs {have[name]['InstanceType']}, "
                f"not {group['InstanceType']}; a group's type cannot change, left as it is"
            )
    for name in sorted(set(have) - set(wanted)):
        module.warn(
            f"HyperPod cluster {request['ClusterName']}: group {name} is not in the spec; left as it is"
        )


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


def present(module: Any, client: Any, request: dict[str, Any]) -> dict[str, Any]:
    name = request["ClusterName"]
    waiter = Waiter(module, client, name)
    cluster = describe(client, name)
    result: dict[str, Any] = {"action": "none", "scaled": {}, "progress": waiter.progress}
    if cluster is None:
        result.update(action="create", changed=True, cluster_arn="", status="")
        if module.check_mode:
            return result
        result["cluster_arn"] = client.create_cluster(**request)["ClusterArn"]
    else:
        _drift(module, cluster, request)
        scaled = _scale(cluster, request)
        result.update(cluster_arn=cluster["ClusterArn"], status=cluster["ClusterStatus"], scaled=scaled)
        if scaled:
            result.update(action="update", changed=True)
            if module.check_mode:
                return result
            if cluster["ClusterStatus"] != "InService":
                cluster = waiter.until_in_service()
            updated = update_request(request)
            validate("UpdateCluster", updated)
            client.update_cluster(**updated)
        else:
            result["changed"] = False
            if module.check_mode or not module.params["wait"] or cluster["ClusterStatus"] == "InService":
                waiter.seen(cluster)
                return result
    if module.params["wait"]:
        result["status"] = waiter.until_in_service()["ClusterStatus"]
    return result


def absent(module: Any, client: Any, name: str) -> dict[str, Any]:
    waiter = Waiter(module, client, name)
    cluster = describe(client, name)
    if cluster is None:
        return {"changed": False, "action": "none", "cluster_arn": "", "status": "", "progress": []}
    result = {
        "changed": True,
        "action": "delete",
        "cluster_arn": cluster["ClusterArn"],
        "status": waiter.seen(cluster),
        "progress": waiter.progress,
    }
    if module.check_mode:
        return result
    if cluster["ClusterStatus"] != "Deleting":
        client.delete_cluster(ClusterName=name)
    if module.params["wait"]:
        waiter.until_gone()
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
    return {
        "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        "path": {"type": "path"},
        "spec": {"type": "dict"},
        "stacks_dir": {"type": "path"},
        "foundation": {"type": "dict", "options": _FOUNDATION},
        "slurm_config": {
            "type": "str",
            "choices": ["provisioning_parameters", "api"],
            "default": "provisioning_parameters",
        },
        "render_only": {"type": "bool", "default": False},
        "wait": {"type": "bool", "default": True},
        "wait_timeout": {"type": "int", "default": 3600},
        "poll_interval": {"type": "int", "default": 30},
    }


def _rendered(module: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Render and validate; any problem fails the module before a client exists."""
    params = module.params
    foundation = {key: value for key, value in (params["foundation"] or {}).items() if value is not None}
    try:
        rendered = render(spec, foundation, params["slurm_config"])
        validate("CreateCluster", rendered["cluster"])
    except HyperPodRenderError as exc:
        module.fail_json(msg=f"HyperPod cannot make this cluster:\n{exc}", problems=exc.problems)
    except HyperPodRequestError as exc:
        module.fail_json(msg=str(exc), operation=exc.operation)
    return rendered


def main() -> None:
    if AnsibleAWSModule is None:
        from ansible.module_utils.basic import AnsibleModule

        AnsibleModule(argument_spec={}, bypass_checks=True).fail_json(
            msg="trainstack.cluster.hyperpod_cluster needs the amazon.aws collection: install it"
        )
    module = AnsibleAWSModule(
        argument_spec=argument_spec(),
        required_one_of=[("path", "spec")],
        mutually_exclusive=[("path", "spec")],
        required_if=[("state", "present", ("foundation",))],
        supports_check_mode=True,
    )
    check_run_params(module)
    spec = load_spec(module)
    result: dict[str, Any] = {"changed": False}
    if module.params["state"] == "present":
        rendered = _rendered(module, spec)
        result.update(
            request=rendered["cluster"],
            provisioning_parameters=rendered["provisioning_parameters"],
            not_rendered=rendered["not_rendered"],
        )
        for line in rendered["not_rendered"]:
            module.warn(f"not in the HyperPod request: {line}")
        if module.params["render_only"]:
            module.exit_json(**result)
    client = module.client("sagemaker", region=spec["region"])
    try:
        if module.params["state"] == "present":
            result.update(present(module, client, result["request"]))
        else:
            result.update(absent(module, client, spec["name"]))
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as error:
        module.fail_json_aws(error, msg=f"HyperPod cluster {spec['name']}")
    except HyperPodRequestError as exc:
        module.fail_json(msg=str(exc), operation=exc.operation)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
