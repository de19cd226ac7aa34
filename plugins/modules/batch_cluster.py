#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module: AWS Batch compute environments, job queues and multi-node job definitions from a spec.

Why a module of ours and not the Batch modules of community.aws: a queue of the spec is four resources that
must agree (a launch template with the catalog's EFA interfaces, a compute environment on it sized in the
type's vCPUs, a job queue on that environment, job definitions whose containers ask for the type's GPUs and
EFA devices), and deleting them runs in the reverse order with each disabled first.
module_utils/cluster/batch_render.py renders them all and botocore's models check them before the first
call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: batch_cluster
short_description: Create or delete AWS Batch environments, queues and multi-node job definitions from a spec
description:
  - Checks the cluster spec as M(trainstack.cluster.cluster_spec) does, reads each queue's vCPU count from EC2
    (C(DescribeInstanceTypes)), then renders per queue an EC2 launch template (our AMI, the catalog's EFA
    interfaces), a managed compute environment, a job queue, and one multi-node parallel job definition per
    test case of O(test_cases).
  - Every request is validated against botocore's Batch and EC2 models before anything is created; a spec or
    input Batch cannot take fails naming the key, and changes nothing.
  - With O(state=present), creates what is missing (found by name) and waits until it is C(VALID); a job
    definition is registered again only when its latest active revision differs. With O(state=absent),
    disables and deletes the job queues, then the compute environments, deregisters the job definitions and
    deletes the launch templates.
version_added: 0.2.0
author: trainstack maintainers (@trainstack)
options:
  state:
    description: C(present) or C(absent).
    type: str
    choices: [present, absent]
    default: present
  testcases_dir:
    description: The directory of the test cases (default the collection's C(testcases)).
    type: path
  foundation:
    description: What the environment is made in.
    type: dict
    suboptions:
      subnet_public:
        description: Accepted as the foundation mapping has it; not used.
        type: str
      subnet_private:
        description: Subnet of the instances (required when C(network.vpc=new)).
        type: str
      security_group:
        description: Security group of the instances and their EFA interfaces (required).
        type: str
      instance_profile:
        description: Instance profile ARN the instances run as (required).
        type: str
      service_role:
        description: Batch's service role ARN; left out, Batch uses its service-linked role.
        type: str
      placement_group:
        description: Cluster placement group of the queues with C(placement_group).
        type: str
  ami_id:
    description: Our AMI, where the spec finds it by C(image.tags).
    type: str
  image:
    description: Container image of the job definitions (holds the test cases' Python environment).
    type: str
  test_cases:
    description: Test cases that get a job definition per queue.
    type: list
    elements: str
    default: [nccl/collectives, pytorch/fsdp]
  payload_dir:
    description: Where the jobs find the test cases (staged by training_job on the shared file system).
    type: str
    default: /fsx/trainstack/testcases
  vcpus:
    description: vCPUs per instance type; read from EC2 when not given (with O(render_only), give them here).
    type: dict
    default: {}
  wait_timeout:
    default: 1800
extends_documentation_fragment:
  - trainstack.cluster.cluster_module
  - trainstack.cluster.cluster_module.wait
  - amazon.aws.common.modules
  - amazon.aws.region.modules
  - amazon.aws.boto3
notes:
  - O(wait_timeout) is 1800 seconds by default and, left out, O(poll_interval) is 10 seconds (a compute
    environment turns C(VALID) within minutes).
  - With O(wait=false), the module still waits for each compute environment to be C(VALID) (Batch puts no job
    queue on another) and for what it deletes to be gone before what that used (queue, environment, launch
    template); only the job queues' C(VALID) is not waited for.
  - The AMI must run the ECS agent (Batch places jobs through ECS).
"""

EXAMPLES = r"""
- name: Make the Batch environment of a spec
  trainstack.cluster.batch_cluster:
    path: inventories/aws/batch/train-batch.yml
    image: 123456789012.dkr.ecr.us-east-1.amazonaws.com/trainstack:ts-2026.10
    ami_id: ami-0d0d0d0d0d0d0d0d0
    foundation:
      subnet_private: subnet-0b0b0b0b0b0b0b0b0
      security_group: sg-0c0c0c0c0c0c0c0c0
      instance_profile: arn:aws:iam::123456789012:instance-profile/trainstack-train-batch-node
"""

RETURN = r"""
requests:
  description: The rendered requests by kind.
  returned: with O(state=present)
  type: dict
created:
  description: What was created or registered (or would be, in check mode).
  returned: always
  type: list
  elements: str
deleted:
  description: What was deleted or deregistered (or would be, in check mode).
  returned: always
  type: list
  elements: str
job_queues:
  description: ARNs of the job queues by name.
  returned: with O(state=present), unless O(render_only)
  type: dict
progress:
  description: C(<seconds>s <resource> <status>) each time a waited-for resource changed status.
  returned: unless O(render_only) or in check mode
  type: list
  elements: str
"""

from pathlib import Path
from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.aws.client import client, reported
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.errors import or_none
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.wait import GONE, Waiter
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import launch_template, spec_module
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.batch_render import (
    DIGEST_TAG,
    TEMPLATE_KIND,
    TEST_CASES,
    BatchRenderError,
    BatchRequestError,
    render,
    resource_name,
    validate,
)

TESTCASES = Path(__file__).resolve().parents[2] / "testcases"
POLL_SECONDS = 10
HINT = "Batch goes on; run the same task again to wait once more"


def _until(waiter: Waiter, what: str, look: Any, wanted: str) -> dict[str, Any] | None:
    """An environment or queue until ``wanted``; an INVALID one ends the wait with Batch's reason."""
    return waiter.until(
        what,
        look,
        wanted,
        status=lambda item: item.get("status", ""),
        failed=("INVALID",),
        reason=lambda item: item.get("statusReason", "-"),
    )


def compute_environment(batch: Any, name: str) -> dict[str, Any] | None:
    found = batch.describe_compute_environments(computeEnvironments=[name])["computeEnvironments"]
    return found[0] if found else None


def job_queue(batch: Any, name: str) -> dict[str, Any] | None:
    found = batch.describe_job_queues(jobQueues=[name])["jobQueues"]
    return found[0] if found else None


def job_definitions(batch: Any, name: str) -> list[dict[str, Any]]:
    """Active revisions of a job definition, newest first."""
    found = batch.describe_job_definitions(jobDefinitionName=name, status="ACTIVE")["jobDefinitions"]
    return sorted(found, key=lambda item: item["revision"], reverse=True)


def template(ec2: Any, name: str) -> dict[str, Any] | None:
    return or_none(
        ec2, lambda: ec2.describe_launch_templates(LaunchTemplateNames=[name])["LaunchTemplates"][0]
    )


def _same_definition(seen: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """The latest active revision was registered from this very request (its digest tag)."""
    return (seen.get("tags") or {}).get(DIGEST_TAG) == wanted["tags"][DIGEST_TAG]


def present(module: Any, batch: Any, ec2: Any, requests: dict[str, Any], waiter: Waiter) -> dict[str, Any]:
    created: list[str] = []
    check = module.check_mode
    for request in requests["launch_templates"]:
        if template(ec2, request["LaunchTemplateName"]) is None:
            created.append(f"launch template {request['LaunchTemplateName']}")
            if not check:
                ec2.create_launch_template(**request)
    for request in requests["compute_environments"]:
        name = request["computeEnvironmentName"]
        if compute_environment(batch, name) is None:
            created.append(f"compute environment {name}")
            if not check:
                batch.create_compute_environment(**request)
        if not check:  # even without O(wait): Batch puts no job queue on an environment that is not VALID
            _until(
                waiter, f"compute environment {name}", lambda n=name: compute_environment(batch, n), "VALID"
            )
    queues = {}
    for request in requests["job_queues"]:
        name = request["jobQueueName"]
        if job_queue(batch, name) is None:
            created.append(f"job queue {name}")
            if not check:
                batch.create_job_queue(**request)
        if not check:
            if module.params["wait"]:
                _until(waiter, f"job queue {name}", lambda n=name: job_queue(batch, n), "VALID")
            queues[name] = job_queue(batch, name)["jobQueueArn"]
    for request in requests["job_definitions"]:
        name = request["jobDefinitionName"]
        active = job_definitions(batch, name)
        if not active or not _same_definition(active[0], request):
            created.append(f"job definition {name}")
            if not check:
                batch.register_job_definition(**request)
    done = {"changed": bool(created), "created": created, "job_queues": queues}
    return done if check else {**done, "progress": waiter.progress}


def absent(
    module: Any, batch: Any, ec2: Any, spec: dict[str, Any], cases: list[str], waiter: Waiter
) -> dict[str, Any]:
    """Queues first (a compute environment in use by a queue cannot go), each disabled before its deletion;
    each gone before what it used goes, so O(wait) changes nothing here."""
    deleted: list[str] = []
    check = module.check_mode
    for queue in spec["queues"]:
        name = resource_name(spec, queue)
        if job_queue(batch, name) is not None:
            deleted.append(f"job queue {name}")
            if not check:
                batch.update_job_queue(jobQueue=name, state="DISABLED")
                batch.delete_job_queue(jobQueue=name)
                _until(waiter, f"job queue {name}", lambda n=name: job_queue(batch, n), GONE)
    for queue in spec["queues"]:
        name = resource_name(spec, queue)
        if compute_environment(batch, name) is not None:
            deleted.append(f"compute environment {name}")
            if not check:
                batch.update_compute_environment(computeEnvironment=name, state="DISABLED")
                batch.delete_compute_environment(computeEnvironment=name)
                _until(
                    waiter, f"compute environment {name}", lambda n=name: compute_environment(batch, n), GONE
                )
    for queue in spec["queues"]:
        for case in cases:
            name = resource_name(spec, queue, case)
            revisions = job_definitions(batch, name)
            if revisions:
                deleted.append(f"job definition {name}")
            for revision in [] if check else revisions:
                batch.deregister_job_definition(jobDefinition=revision["jobDefinitionArn"])
        name = launch_template.template_name(spec["name"], queue["name"], TEMPLATE_KIND)
        if template(ec2, name) is not None:
            deleted.append(f"launch template {name}")
            if not check:
                ec2.delete_launch_template(LaunchTemplateName=name)
    done = {"changed": bool(deleted), "deleted": deleted}
    return done if check else {**done, "progress": waiter.progress}


_FOUNDATION = {
    key: {"type": "str"}
    for key in (
        "subnet_public",
        "subnet_private",
        "security_group",
        "instance_profile",
        "service_role",
        "placement_group",
    )
}


def argument_spec() -> dict[str, Any]:
    return spec_module.argument_spec(
        {
            "testcases_dir": {"type": "path"},
            "foundation": {"type": "dict", "options": _FOUNDATION},
            "ami_id": {"type": "str"},
            "image": {"type": "str"},
            "test_cases": {"type": "list", "elements": "str", "default": list(TEST_CASES)},
            "payload_dir": {"type": "str", "default": "/fsx/trainstack/testcases"},
            "vcpus": {"type": "dict", "default": {}},
        },
        wait_timeout=1800,
    )


def _requests(module: Any, spec: dict[str, Any], vcpus: dict[str, int]) -> dict[str, Any]:
    params = module.params

    def make() -> dict[str, Any]:
        requests = render(
            spec,
            spec_module.foundation(module),
            params["ami_id"],
            vcpus=vcpus,
            image=params["image"] or "",
            test_cases=params["test_cases"],
            payload_dir=params["payload_dir"],
            testcases_dir=params["testcases_dir"] or TESTCASES,
            stacks=params["stacks_dir"],
        )
        validate(requests)
        return requests

    return spec_module.rendered(module, "Batch", (BatchRenderError, BatchRequestError), make, "environment")


def _vcpus(module: Any, spec: dict[str, Any]) -> dict[str, int]:
    """vCPUs per instance type of the spec: the caller's, else EC2's DescribeInstanceTypes (a read)."""
    given = {key: int(value) for key, value in module.params["vcpus"].items()}
    missing = sorted({q["instance_type"] for q in spec["queues"]} - set(given))
    if missing and not module.params["render_only"]:
        ec2 = client(module, "ec2", spec["region"])
        with reported(module, f"vCPUs of {', '.join(missing)} (DescribeInstanceTypes)"):
            for item in ec2.describe_instance_types(InstanceTypes=missing)["InstanceTypes"]:
                given[item["InstanceType"]] = int(item["VCpuInfo"]["DefaultVCpus"])
    return given


def main() -> None:
    module, spec = spec_module.cluster_module("batch_cluster", argument_spec(), ("foundation", "image"))
    params = module.params
    result: dict[str, Any] = {"changed": False, "created": [], "deleted": []}
    if params["state"] == "present":
        # Everything the spec alone decides is refused before any call, the vCPU look-up included.
        _requests(module, spec, {q["instance_type"]: 1 for q in spec["queues"]})
        requests = _requests(module, spec, _vcpus(module, spec))
        spec_module.keep_rendered(module, result, requests, "Batch")
    batch = client(module, "batch", spec["region"])
    ec2 = client(module, "ec2", spec["region"])
    waiter = Waiter.of_module(module, "Batch", POLL_SECONDS, HINT)
    with reported(module, f"Batch environment {spec['name']}"):
        if params["state"] == "present":
            result.update(present(module, batch, ec2, result["requests"], waiter))
        else:
            result.update(absent(module, batch, ec2, spec, params["test_cases"], waiter))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
