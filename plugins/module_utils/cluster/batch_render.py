# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Render a normalised cluster spec (cluster/cluster_spec.py) as the AWS Batch requests that make it.

Why Batch beside the Slurm and EKS renderers: Batch runs a multi-node job without a scheduler to keep. Each
spec queue becomes a managed EC2 compute environment of its instance type (our AMI, through an EC2 launch
template carrying the catalog's EFA interfaces, module_utils/cluster/launch_template.py) and a job queue on
it; each test case named (nccl/collectives and pytorch/fsdp by default) becomes a multi-node parallel job
definition per queue, whose container asks for every GPU of the type and reaches each EFA device. Batch sizes
compute environments in vCPUs, which the instance catalog does not hold: the caller passes each type's vCPUs
as EC2's DescribeInstanceTypes answers them.

Pure functions, nothing sent; validate() checks each request against botocore's Batch and EC2 models.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
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
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.cluster_spec import (
    image_flavour_problems,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.errors import (
    RenderError,
    RequestError,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.files import strict_yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.stack.stack_matrix import StackError
from ansible_collections.trainstack.cluster.plugins.module_utils.stack.stack_resolver import (
    load_stack,
    stacks_dir,
)

FOUNDATION_KEYS = (
    "subnet_public",
    "subnet_private",
    "security_group",
    "instance_profile",
    "service_role",
    "placement_group",
)
TEST_CASES = ("nccl/collectives", "pytorch/fsdp")
# The image factory's flavour with the ECS agent and GPU support (docs/aws-eks.md#aws-batch).
BATCH_FLAVOUR = "batch-gpu"
INSTANCE_PROFILE = re.compile(r"^arn:aws[a-z-]*:iam::[0-9]{12}:instance-profile/[\w+=,.@/-]+$")
ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[\w+=,.@/-]+$")
AMI_ID = re.compile(r"^ami-[0-9a-f]{8,17}$")
# Batch names: letters, digits, '-' and '_', at most 128 characters (the Batch model's documentation).
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
TEMPLATE_KIND = "batch"
MASTER_PORT = 29500
DIGEST_TAG = "trainstack:definition-sha256"
# Share of the catalog's host memory the container asks for: ECS registers less than the instance has.
MEMORY_SHARE = 0.9


class BatchRenderError(RenderError):
    """The spec or the inputs ask for what Batch cannot make; one '<key>: <rule>' line per problem."""


class BatchRequestError(RequestError):
    """A rendered request is not one botocore's model accepts; names the operation and the resource."""


def resource_name(spec: Mapping[str, Any], queue: Mapping[str, Any], case: str | None = None) -> str:
    """<cluster>-<queue>[-<test case with '/' as '-'>]: compute environment, job queue and job definitions."""
    base = f"{spec['name']}-{queue['name']}"
    return f"{base}-{case.replace('/', '-')}" if case else base


# ---------------------------------------------------------------- checks before anything is rendered


def _foundation_problems(foundation: Mapping[str, Any], spec: Mapping[str, Any]) -> list[str]:
    found = [
        f"foundation.{key}: not a known key (known: {', '.join(FOUNDATION_KEYS)})"
        for key in sorted(set(foundation) - set(FOUNDATION_KEYS))
    ]
    if not INSTANCE_PROFILE.match(str(foundation.get("instance_profile") or "")):
        found.append(
            "foundation.instance_profile: must be an instance profile ARN: every instance of a compute "
            "environment runs as it (computeResources.instanceRole)"
        )
    role = foundation.get("service_role")
    if role and not ROLE_ARN.match(str(role)):
        found.append(
            "foundation.service_role: must be an IAM role ARN (or left out: Batch's service-linked role)"
        )
    if not foundation.get("security_group"):
        found.append(
            "foundation.security_group: is required: the instances and their EFA interfaces are in it"
        )
    if spec["network"]["vpc"] == "new" and not foundation.get("subnet_private"):
        found.append(
            "foundation.subnet_private: is required: network.vpc is new, so the foundation's subnet is used"
        )
    return found


def _queue_problems(
    spec: Mapping[str, Any],
    foundation: Mapping[str, Any],
    vcpus: Mapping[str, int],
    cases: list[str],
) -> list[str]:
    found = []
    for index, queue in enumerate(spec["queues"]):
        where = f"queues[{index}]"
        if queue["capacity_type"] == "capacity_block":
            found.append(
                f"{where}.capacity_type: a Batch compute environment runs On-Demand (EC2) or Spot instances; "
                "capacity_block is not rendered for Batch"
            )
        if queue["placement_group"] and not foundation.get("placement_group"):
            found.append(
                f"{where}.placement_group: is true but the foundation has no placement group "
                "(foundation.placement_group); make one with the foundation or set it to false"
            )
        if int(vcpus.get(queue["instance_type"]) or 0) < 1:
            found.append(f"{where}.instance_type: no vCPU count of {queue['instance_type']} (vcpus)")
        for case in ("", *cases):
            name = resource_name(spec, queue, case or None)
            if not NAME.match(name):
                found.append(
                    f"{where}.name: {name!r} is not a Batch name (letters, digits, - and _, at most 128)"
                )
        found += launch_template.name_problems(
            f"{where}.name", launch_template.template_name(spec["name"], queue["name"], TEMPLATE_KIND)
        )
    return found


def load_test_case(directory: Path, case: str) -> tuple[dict[str, Any] | None, list[str]]:
    """The test case's manifest (testcases/<case>/testcase.yml), or why it cannot be run by Batch."""
    # PyYAML is imported here, not at the top: module_utils must import on any target Python.
    import yaml

    path = directory / case / "testcase.yml"
    try:
        manifest = strict_yaml.load(path)
    except OSError:
        return None, [f"test_cases: {case!r} is not a test case (no {path})"]
    except yaml.YAMLError as err:
        return None, [f"test_cases: {path} is not valid YAML: {err}"]
    if not isinstance(manifest, dict) or "entrypoint" not in manifest:
        return None, [f"test_cases: {path} has no entrypoint"]
    return manifest, []


# ---------------------------------------------------------------- the requests


def _tags(spec: Mapping[str, Any]) -> dict[str, str]:
    """The cluster's name and stack, and where its data and checkpoints go (cluster/storage.py)."""
    return {
        "trainstack:cluster": spec["name"],
        "trainstack:stack": spec["image"]["stack"],
        **storage.tags(spec),
    }


def _subnet(spec: Mapping[str, Any], foundation: Mapping[str, Any]) -> str:
    network = spec["network"]
    return network["private_subnet_id"] if network["vpc"] == "existing" else foundation["subnet_private"]


def compute_environment_request(
    spec: Mapping[str, Any], queue: Mapping[str, Any], foundation: Mapping[str, Any], ami: str, vcpus: int
) -> dict[str, Any]:
    """CreateComputeEnvironment: managed EC2 (or Spot) of the queue's type, sized in its vCPUs, our AMI."""
    spot = queue["capacity_type"] == "spot"
    resources: dict[str, Any] = {
        "type": "SPOT" if spot else "EC2",
        "allocationStrategy": "SPOT_PRICE_CAPACITY_OPTIMIZED" if spot else "BEST_FIT_PROGRESSIVE",
        "minvCpus": queue["min_count"] * vcpus,
        "maxvCpus": queue["max_count"] * vcpus,
        "instanceTypes": [queue["instance_type"]],
        "subnets": [_subnet(spec, foundation)],
        "securityGroupIds": [foundation["security_group"]],
        "instanceRole": foundation["instance_profile"],
        "launchTemplate": {
            "launchTemplateName": launch_template.template_name(spec["name"], queue["name"], TEMPLATE_KIND),
            "version": "$Default",
        },
        "ec2Configuration": [{"imageType": "ECS_AL2023_NVIDIA", "imageIdOverride": ami}],
        "tags": _tags(spec),
    }
    if queue["placement_group"]:
        resources["placementGroup"] = foundation["placement_group"]
    request: dict[str, Any] = {
        "computeEnvironmentName": resource_name(spec, queue),
        "type": "MANAGED",
        "state": "ENABLED",
        "computeResources": resources,
        "tags": _tags(spec),
    }
    if foundation.get("service_role"):
        request["serviceRole"] = foundation["service_role"]
    return request


def job_queue_request(spec: Mapping[str, Any], queue: Mapping[str, Any]) -> dict[str, Any]:
    name = resource_name(spec, queue)
    return {
        "jobQueueName": name,
        "state": "ENABLED",
        "priority": 1,
        "computeEnvironmentOrder": [{"order": 1, "computeEnvironment": name}],
        "tags": _tags(spec),
    }


def _command(
    manifest: Mapping[str, Any], case: str, gpus: int, payload_dir: str, data_dir: str = ""
) -> list[str]:
    """torchrun on every node: Batch gives each node its index and the node count, and every node but the main
    one the main node's address (the main node is its own). A test case that takes ``data`` (its manifest's
    arguments name it) reads the cluster's data directory (cluster/storage.py): the job definition is Batch's
    launch, so the default goes into it; a submission's own command overrides it."""
    words = [
        "torchrun",
        "--nnodes=$AWS_BATCH_JOB_NUM_NODES",
        f"--nproc-per-node={gpus}",
        "--node-rank=$AWS_BATCH_JOB_NODE_INDEX",
        '--master-addr="${AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS:-$(hostname -i)}"',
        f"--master-port={MASTER_PORT}",
        shlex.quote(f"{payload_dir}/{case}/{manifest['entrypoint']}"),
    ]
    arguments = dict(manifest.get("arguments") or {})
    if data_dir and "data" in arguments:
        arguments["data"] = data_dir
    for key, value in sorted(arguments.items()):
        if value is not None:
            words.append(shlex.quote(f"--{key}={value}"))
    return ["sh", "-c", "exec " + " ".join(words)]


def _environment(
    manifest: Mapping[str, Any], itype: instance_catalog.InstanceType, stack: Mapping[str, Any], efa: bool
) -> list[dict[str, str]]:
    env: dict[str, str] = dict(itype.env)
    if efa:
        env.update({str(k): str(v) for k, v in (stack.get("environment") or {}).items()})
    env.update({str(k): str(v) for k, v in (manifest.get("environment") or {}).items()})
    return [{"name": key, "value": value} for key, value in sorted(env.items())]


def job_definition_request(
    spec: Mapping[str, Any],
    queue: Mapping[str, Any],
    case: str,
    manifest: Mapping[str, Any],
    *,
    itype: instance_catalog.InstanceType,
    vcpus: int,
    image: str,
    payload_dir: str,
    stack: Mapping[str, Any],
) -> dict[str, Any]:
    """RegisterJobDefinition (multinode): max_count nodes, each container with every GPU and EFA device."""
    gpus = itype.gpu_count or 0
    memory = int((itype.host_memory_gib or 0) * 1024 * MEMORY_SHARE)
    needs = [{"type": "VCPU", "value": str(vcpus)}, {"type": "MEMORY", "value": str(memory)}]
    if gpus:
        needs.append({"type": "GPU", "value": str(gpus)})
    devices = [
        {
            "hostPath": f"/dev/infiniband/uverbs{n}",
            "containerPath": f"/dev/infiniband/uverbs{n}",
            "permissions": ["READ", "WRITE", "MKNOD"],
        }
        for n in range(itype.efa_interfaces if queue["efa"] else 0)
    ]
    shared = (
        str(Path(payload_dir).parts[1])
        if payload_dir.startswith("/") and len(Path(payload_dir).parts) > 1
        else ""
    )
    container: dict[str, Any] = {
        "image": image,
        "command": _command(manifest, case, gpus, payload_dir, storage.defaults(spec).get("data_dir", "")),
        "resourceRequirements": needs,
        "environment": _environment(manifest, itype, stack, queue["efa"]),
        "ulimits": [{"name": "memlock", "softLimit": -1, "hardLimit": -1}],
        "linuxParameters": {"devices": devices} if devices else {},
    }
    if shared:
        # The payload lives on the host's shared file system (/fsx): the instance mounts it, the job sees it.
        container["volumes"] = [{"name": "shared", "host": {"sourcePath": f"/{shared}"}}]
        container["mountPoints"] = [{"sourceVolume": "shared", "containerPath": f"/{shared}"}]
    if not container["linuxParameters"]:
        del container["linuxParameters"]
    request = {
        "jobDefinitionName": resource_name(spec, queue, case),
        "type": "multinode",
        "nodeProperties": {
            "numNodes": queue["max_count"],
            "mainNode": 0,
            "nodeRangeProperties": [
                {"targetNodes": "0:", "instanceTypes": [queue["instance_type"]], "container": container}
            ],
        },
        "retryStrategy": resilience.batch_retry_strategy(resilience.of(spec)),
        "platformCapabilities": ["EC2"],
        "propagateTags": True,
    }
    return {**request, "tags": {**_tags(spec), DIGEST_TAG: definition_digest(request)}}


def definition_digest(request: Mapping[str, Any]) -> str:
    """sha256 of a job definition request without its tags: the module registers a new revision only when the
    latest active one carries another digest (Batch answers with defaults added, so fields do not compare)."""
    body = {key: value for key, value in request.items() if key != "tags"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def not_rendered(spec: Mapping[str, Any]) -> list[str]:
    found = [
        f"head_node.instance_type: Batch schedules the jobs ({spec['head_node']['instance_type']} unused)"
    ]
    if spec.get("login_nodes"):
        found.append("login_nodes: Batch jobs are submitted through its API, not from login nodes")
    storage = spec["shared_storage"]
    if storage.get("fsx_lustre") or storage.get("efs_home"):
        found.append("shared_storage: Batch mounts no file system; the launch template's user data mounts it")
    if spec["slurm_accounting"]:
        found.append("slurm_accounting: Batch runs no Slurm")
    return found + resilience.batch_not_rendered(resilience.of(spec))


def render(
    spec: Mapping[str, Any],
    foundation: Mapping[str, Any],
    ami_id: str | None,
    *,
    vcpus: Mapping[str, int],
    image: str,
    test_cases: list[str] | tuple[str, ...] = TEST_CASES,
    payload_dir: str = "/fsx/trainstack/testcases",
    testcases_dir: str | Path,
    stacks: str | Path | None = None,
    catalog: instance_catalog.Catalog | None = None,
) -> dict[str, Any]:
    """The Batch requests: {'launch_templates', 'compute_environments', 'job_queues', 'job_definitions',
    'not_rendered'}. Every problem is collected and raised at once (BatchRenderError)."""
    catalog = catalog or instance_catalog.default()
    problems = _foundation_problems(foundation, spec) + _queue_problems(
        spec, foundation, vcpus, list(test_cases)
    )
    ami = ami_id or spec["image"].get("ami_id")
    if not ami or not AMI_ID.match(ami):
        problems.append(f"ami_id: {ami!r} is not an AMI id; pass the AMI found by image.tags as ami_id")
    problems += image_flavour_problems(spec, BATCH_FLAVOUR, "Batch places jobs through the ECS agent")
    if not image:
        problems.append("image: the container image of the test cases is required")
    manifests = {}
    for case in test_cases:
        manifest, found = load_test_case(Path(testcases_dir), case)
        manifests[case] = manifest
        problems += found
    stack: dict[str, Any] = {}
    try:
        stack = load_stack(stacks_dir(stacks), spec["image"]["stack"])
    except StackError as exc:
        problems.append(f"image.stack: {exc}")
    if problems:
        raise BatchRenderError(problems)
    out: dict[str, Any] = {
        "launch_templates": [],
        "compute_environments": [],
        "job_queues": [],
        "job_definitions": [],
    }
    for queue in spec["queues"]:
        itype = catalog.get(queue["instance_type"])
        count = int(vcpus[queue["instance_type"]])
        data = launch_template.template_data(
            queue, itype, ami=str(ami), security_group=foundation["security_group"], placement_group=None
        )
        name = launch_template.template_name(spec["name"], queue["name"], TEMPLATE_KIND)
        out["launch_templates"].append(launch_template.request(name, data, _tags(spec)))
        out["compute_environments"].append(
            compute_environment_request(spec, queue, foundation, str(ami), count)
        )
        out["job_queues"].append(job_queue_request(spec, queue))
        out["job_definitions"] += [
            job_definition_request(
                spec,
                queue,
                case,
                manifests[case],
                itype=itype,
                vcpus=count,
                image=image,
                payload_dir=payload_dir,
                stack=stack,
            )
            for case in test_cases
        ]
    out["not_rendered"] = not_rendered(spec)
    return out


def validate(requests: Mapping[str, Any]) -> None:
    """Check every request against botocore's Batch and EC2 models; BatchRequestError names the first."""
    labelled = [
        ("ec2", "CreateLaunchTemplate", t["LaunchTemplateName"], t) for t in requests["launch_templates"]
    ]
    labelled += [
        ("batch", "CreateComputeEnvironment", c["computeEnvironmentName"], c)
        for c in requests["compute_environments"]
    ]
    labelled += [("batch", "CreateJobQueue", q["jobQueueName"], q) for q in requests["job_queues"]]
    labelled += [
        ("batch", "RegisterJobDefinition", d["jobDefinitionName"], d) for d in requests["job_definitions"]
    ]
    for service, operation, label, request in labelled:
        report = botocore_model.request_problems(botocore_model.service_model(service), operation, request)
        if report:
            raise BatchRequestError(operation, label, report)
