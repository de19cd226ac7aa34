#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module: an AWS PCS cluster, its compute node groups and its queues, from a cluster spec.

Why a module of ours: neither amazon.aws nor community.aws has PCS modules, and a cluster is three kinds of
resource created in order (cluster, node groups, queues) and deleted in the reverse order, each waiting for
the one before. The requests come from module_utils/cluster/pcs_render.py and are checked against botocore's
model of the PCS API before the first one is sent, so a spec PCS cannot take changes nothing.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pcs_cluster
short_description: Create or delete an AWS PCS cluster, its node groups and queues from a cluster spec
description:
  - Checks the cluster spec exactly as M(trainstack.cluster.cluster_spec) does (O(path) or an already
    normalised O(spec)), then renders the AWS PCS requests, C(CreateCluster) (Slurm at the release the image's
    stack builds, sized for the queues, accounting when the spec asks for it), one C(CreateComputeNodeGroup)
    per queue and one for the login nodes (our AMI through an EC2 launch template, the foundation's instance
    profile, subnet and security group), and one C(CreateQueue) per queue on its node group.
  - Refuses, naming the spec key and the rule, what PCS cannot express; for example EFA, a placement group or
    a capacity reservation on a queue without a launch template of its own (PCS takes them only from the
    launch template), a Slurm release PCS does not run, or more nodes than the largest PCS cluster manages.
  - Every rendered request is validated against botocore's model of the PCS API (required members, types,
    enums, patterns, lengths and ranges); a request the model refuses fails the module, naming the operation,
    before any call.
  - With O(state=present), creates what does not exist yet (found by name), waiting for each to become
    C(ACTIVE); an existing cluster, node group or queue is left as it is. With O(state=absent), deletes the
    queues, then the node groups, then the cluster, waiting for each step to finish.
version_added: 0.2.0
author: trainstack maintainers (@trainstack)
options:
  state:
    description: C(present) creates what is missing; C(absent) deletes queues, node groups and the cluster.
    type: str
    choices: [present, absent]
    default: present
  foundation:
    description:
      - What the foundation created or found, as for M(trainstack.cluster.pcluster_config)
        (C(trainstack.cluster.pcluster_foundation) maps the foundation's record onto it). Required with
        O(state=present).
    type: dict
    suboptions:
      subnet_public:
        description: Subnet of the login nodes (required when C(network.vpc=new)).
        type: str
      subnet_private:
        description:
          - Subnet of the compute nodes and of PCS's controller interfaces (required when C(network.vpc=new)).
        type: str
      security_group:
        description:
          - Security group of the controller interfaces, and of the node groups that use O(launch_template).
        type: str
      bucket:
        description:
          - The cluster's S3 bucket. With O(foundation.bundle_sha256), every node runs
            C(s3://<bucket>/trainstack/bootstrap.sh) as a PCS lifecycle action once it has booted.
        type: str
      bundle_sha256:
        description: sha256 of the node bundle in C(trainstack/bundles/<sha256>.tar.gz) of the bucket.
        type: str
      instance_profile:
        description:
          - Instance profile ARN every node group launches with (required). PCS wants its role to be named
            C(AWSPCS...) or to have the path C(/aws-pcs/), and to be allowed
            C(pcs:RegisterComputeNodeGroupInstance).
        type: str
      iam_policies:
        description: Accepted as the foundation mapping has it; PCS takes only O(foundation.instance_profile).
        type: list
        elements: str
      placement_group:
        description: Accepted as the foundation mapping has it; PCS reads it from the launch template.
        type: str
      database:
        description: Accepted as the foundation mapping has it; PCS keeps the accounting database itself.
        type: dict
      fsx_file_system_id:
        description: Accepted as the foundation mapping has it; PCS mounts no file system.
        type: str
  ami_id:
    description: The AMI, where the spec finds it by C(image.tags) (look it up with amazon.aws.ec2_ami_info).
    type: str
  launch_template:
    description: The EC2 launch template of every node group that has none in O(launch_templates).
    type: dict
    suboptions:
      id:
        description: Launch template id (C(lt-...)).
        type: str
        required: true
      version:
        description: Launch template version.
        type: str
        default: "1"
  launch_templates:
    description:
      - Launch templates of particular node groups, by queue name (or C(login)), each a mapping with C(id) and
        optional C(version) (default C(1)). A queue with C(efa), C(placement_group) or
        C(capacity_reservation_id) needs one; its node group then gets no security group of its own (the
        template's network interfaces carry it).
    type: dict
    default: {}
extends_documentation_fragment:
  - trainstack.cluster.cluster_module
  - trainstack.cluster.cluster_module.wait
  - amazon.aws.common.modules
  - amazon.aws.region.modules
  - amazon.aws.boto3
notes:
  - Left out, O(poll_interval) is 15 seconds.
  - With O(wait=false), the module still waits for the cluster and the node groups to be C(ACTIVE) (PCS puts
    no node group on a cluster, nor a queue on a node group, that is not) and, with O(state=absent), for the
    queues and then the node groups to be gone (PCS deletes nothing that something still uses); only the
    last step, the queues' C(ACTIVE) or the cluster's deletion, is not waited for.
  - An existing resource with other settings than the spec's is not updated; the differences the module can
    see (cluster size, Slurm version) are reported as warnings.
  - moto has no PCS backend; the requests are checked against botocore's model of the API, not against PCS.
seealso:
  - module: trainstack.cluster.cluster_spec
  - module: trainstack.cluster.pcluster_config
"""

EXAMPLES = r"""
- name: Render and check the PCS requests of a spec, without AWS
  trainstack.cluster.pcs_cluster:
    path: inventories/aws/clusters/p4d.yml
    render_only: true
    foundation:
      subnet_public: subnet-0123456789abcdef0
      subnet_private: subnet-0fedcba9876543210
      security_group: sg-0123456789abcdef0
      instance_profile: arn:aws:iam::123456789012:instance-profile/aws-pcs/train-p4d-node
    ami_id: ami-0123456789abcdef0
    launch_template:
      id: lt-0123456789abcdef0
    launch_templates:
      a100:
        id: lt-0fedcba9876543210
        version: "2"

- name: Delete the cluster, its queues and node groups
  trainstack.cluster.pcs_cluster:
    path: inventories/aws/clusters/p4d.yml
    state: absent
"""

RETURN = r"""
requests:
  description:
    - The rendered requests, C(cluster) (CreateCluster), C(node_groups) (CreateComputeNodeGroup) and C(queues)
      (CreateQueue, whose C(computeNodeGroupId) holds the node group's name until the id is known).
  returned: with O(state=present)
  type: dict
not_rendered:
  description: Keys of the spec no PCS request carries, each with where it is handled instead.
  returned: with O(state=present)
  type: list
  elements: str
cluster_id:
  description: Id of the PCS cluster; empty when there is none (or in check mode before it is created).
  returned: unless O(render_only)
  type: str
  sample: pcs_abcdef0123
node_group_ids:
  description:
    - Ids of the cluster's compute node groups by name, once they are C(ACTIVE); the login group's id is what
      the C(ec2_cluster) inventory's C(pcs_login_node_groups) option takes.
  returned: with O(state=present), unless O(render_only) or in check mode
  type: dict
  sample: {"a100": "pcs_4kq8f2ab0c", "login": "pcs_9xw2m1cd3e"}
created:
  description:
    - What was created (or would be, in check mode), as C(cluster <name>), C(node group <name>) and
      C(queue <name>).
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
  returned: unless O(render_only) or in check mode
  type: list
  elements: str
"""

from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.aws.client import client, reported
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.drift import drift, warn
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.errors import or_none
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.wait import GONE, Look, Waiter
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import spec_module
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.pcs_render import (
    PcsRenderError,
    PcsRequestError,
    render,
    validate,
)

POLL_SECONDS = 15
FAILED = ("CREATE_FAILED", "DELETE_FAILED", "UPDATE_FAILED")
HINT = "PCS goes on; run the same task again to wait once more, or watch it with aws pcs get-cluster"


def get_cluster(pcs: Any, name: str) -> dict[str, Any] | None:
    return or_none(pcs, lambda: pcs.get_cluster(clusterIdentifier=name)["cluster"])


def _listed(pcs: Any, operation: str, key: str, cluster_id: str) -> list[dict[str, Any]]:
    """Every item of a PCS List* call, following nextToken."""
    found: list[dict[str, Any]] = []
    request: dict[str, Any] = {"clusterIdentifier": cluster_id}
    while True:
        page = getattr(pcs, operation)(**request)
        found.extend(page.get(key, []))
        if not page.get("nextToken"):
            return found
        request["nextToken"] = page["nextToken"]


def node_groups(pcs: Any, cluster_id: str) -> dict[str, dict[str, Any]]:
    return {
        group["name"]: group
        for group in _listed(pcs, "list_compute_node_groups", "computeNodeGroups", cluster_id)
    }


def queues(pcs: Any, cluster_id: str) -> dict[str, dict[str, Any]]:
    return {queue["name"]: queue for queue in _listed(pcs, "list_queues", "queues", cluster_id)}


def _kind(lister: Any) -> str:
    return "node group" if lister is node_groups else "queue"


def _statuses(items: dict[str, dict[str, Any]]) -> str:
    """One status when all share it, else each item's: what a progress line and a timeout show."""
    found = {item["status"] for item in items.values()}
    if len(found) == 1:
        return found.pop()
    return ", ".join(f"{name} {item['status']}" for name, item in sorted(items.items()))


def _failure(kind: str, items: dict[str, dict[str, Any]]) -> Look | None:
    """A failed create or delete never turns ACTIVE or goes away: end the wait instead of waiting it out."""
    for name, item in sorted(items.items()):
        if item["status"] in FAILED:
            return Look(item["status"], failure=f"PCS {kind} {name} is {item['status']}")
    return None


def wait_listed(waiter: Waiter, pcs: Any, lister: Any, cluster_id: str, names: set[str]) -> dict:
    """Wait until every named node group (or queue) of the cluster is ACTIVE; returns them by name."""
    kind = _kind(lister)
    current: dict[str, dict[str, Any]] = {}

    def look() -> Look:
        current.clear()
        current.update(lister(pcs, cluster_id))
        missing = sorted(names - set(current))
        if missing:
            return Look(
                GONE, failure=f"PCS {kind} {missing[0]}: created, but not listed by the cluster {cluster_id}"
            )
        wanted = {name: current[name] for name in names}
        pending = {name: item for name, item in wanted.items() if item["status"] != "ACTIVE"}
        return _failure(kind, wanted) or Look(_statuses(pending) if pending else "ACTIVE", done=not pending)

    what = f"{kind}{'s' if len(names) > 1 else ''} {', '.join(sorted(names))}"
    waiter.poll(what, "ACTIVE", look)
    return current


def wait_gone(waiter: Waiter, pcs: Any, lister: Any, cluster_id: str) -> None:
    """Wait until the cluster lists no node group (or queue) any more."""
    kind = _kind(lister)

    def look() -> Look:
        left = lister(pcs, cluster_id)
        return _failure(kind, left) or Look(_statuses(left) if left else GONE, done=not left)

    waiter.poll(f"{kind}s of cluster {cluster_id}", GONE, look)


def _drift(module: Any, cluster: dict[str, Any], wanted: dict[str, Any]) -> None:
    """Report, never change, what differs between an existing cluster and the spec's request."""
    seen = {"size": cluster.get("size"), "Slurm version": cluster.get("scheduler", {}).get("version")}
    asked = {"size": wanted["size"], "Slurm version": wanted["scheduler"]["version"]}
    warn(module, f"PCS cluster {cluster['name']}", drift(seen, asked))


def present(module: Any, pcs: Any, requests: dict[str, Any], waiter: Waiter) -> dict[str, Any]:
    name = requests["cluster"]["clusterName"]
    created: list[str] = []
    cluster = get_cluster(pcs, name)
    if cluster is None:
        created.append(f"cluster {name}")
        if module.check_mode:
            created += [f"node group {g['computeNodeGroupName']}" for g in requests["node_groups"]]
            created += [f"queue {q['queueName']}" for q in requests["queues"]]
            return {"changed": True, "cluster_id": "", "created": created, "deleted": []}
        cluster = pcs.create_cluster(**requests["cluster"])["cluster"]
    else:
        _drift(module, cluster, requests["cluster"])
    if module.check_mode:
        groups, listed = node_groups(pcs, cluster["id"]), queues(pcs, cluster["id"])
        created += [
            f"node group {g['computeNodeGroupName']}"
            for g in requests["node_groups"]
            if g["computeNodeGroupName"] not in groups
        ]
        created += [f"queue {q['queueName']}" for q in requests["queues"] if q["queueName"] not in listed]
        return {"changed": bool(created), "cluster_id": cluster["id"], "created": created, "deleted": []}
    # The cluster and its node groups are waited for even without O(wait): PCS builds on ACTIVE ones only.
    if cluster["status"] != "ACTIVE":
        cluster = waiter.until(f"cluster {name}", lambda: get_cluster(pcs, name), "ACTIVE", failed=FAILED)
    groups = node_groups(pcs, cluster["id"])
    for request in requests["node_groups"]:
        if request["computeNodeGroupName"] not in groups:
            made = pcs.create_compute_node_group(**{**request, "clusterIdentifier": cluster["id"]})
            created.append(f"node group {made['computeNodeGroup']['name']}")
    wanted_groups = {request["computeNodeGroupName"] for request in requests["node_groups"]}
    groups = wait_listed(waiter, pcs, node_groups, cluster["id"], wanted_groups)
    listed = queues(pcs, cluster["id"])
    for request in requests["queues"]:
        if request["queueName"] not in listed:
            targets = [
                {"computeNodeGroupId": groups[target["computeNodeGroupId"]]["id"]}
                for target in request["computeNodeGroupConfigurations"]
            ]
            made = pcs.create_queue(
                **{**request, "clusterIdentifier": cluster["id"], "computeNodeGroupConfigurations": targets}
            )
            created.append(f"queue {made['queue']['name']}")
    if module.params["wait"]:
        wait_listed(waiter, pcs, queues, cluster["id"], {q["queueName"] for q in requests["queues"]})
    ids = {name: group["id"] for name, group in sorted(groups.items())}
    return {
        "changed": bool(created),
        "cluster_id": cluster["id"],
        "node_group_ids": ids,
        "created": created,
        "progress": waiter.progress,
    }


def absent(module: Any, pcs: Any, name: str, waiter: Waiter) -> dict[str, Any]:
    """Queues first, then node groups, then the cluster: PCS refuses to delete what something still uses."""
    cluster = get_cluster(pcs, name)
    if cluster is None:
        return {"changed": False, "cluster_id": "", "created": [], "deleted": []}
    cluster_id = cluster["id"]
    listed, groups = queues(pcs, cluster_id), node_groups(pcs, cluster_id)
    deleted = [f"queue {q}" for q in sorted(listed)] + [f"node group {g}" for g in sorted(groups)]
    deleted.append(f"cluster {name}")
    if module.check_mode:
        return {"changed": True, "cluster_id": cluster_id, "created": [], "deleted": deleted}
    for queue in sorted(listed):
        if listed[queue]["status"] != "DELETING":
            pcs.delete_queue(clusterIdentifier=cluster_id, queueIdentifier=listed[queue]["id"])
    wait_gone(waiter, pcs, queues, cluster_id)
    for group in sorted(groups):
        if groups[group]["status"] != "DELETING":
            pcs.delete_compute_node_group(
                clusterIdentifier=cluster_id, computeNodeGroupIdentifier=groups[group]["id"]
            )
    wait_gone(waiter, pcs, node_groups, cluster_id)
    if cluster["status"] != "DELETING":
        pcs.delete_cluster(clusterIdentifier=cluster_id)
    if module.params["wait"]:
        waiter.until(f"cluster {name}", lambda: get_cluster(pcs, name), GONE, failed=FAILED)
    return {
        "changed": True,
        "cluster_id": cluster_id,
        "created": [],
        "deleted": deleted,
        "progress": waiter.progress,
    }


_LAUNCH_TEMPLATE = {"id": {"type": "str", "required": True}, "version": {"type": "str", "default": "1"}}
_FOUNDATION = {
    "subnet_public": {"type": "str"},
    "subnet_private": {"type": "str"},
    "security_group": {"type": "str"},
    "bucket": {"type": "str"},
    "bundle_sha256": {"type": "str"},
    "instance_profile": {"type": "str"},
    "iam_policies": {"type": "list", "elements": "str"},
    "placement_group": {"type": "str"},
    "database": {"type": "dict"},
    "fsx_file_system_id": {"type": "str"},
}


def argument_spec() -> dict[str, Any]:
    return spec_module.argument_spec(
        {
            "foundation": {"type": "dict", "options": _FOUNDATION},
            "ami_id": {"type": "str"},
            "launch_template": {"type": "dict", "options": _LAUNCH_TEMPLATE},
            "launch_templates": {"type": "dict", "default": {}},
        }
    )


def _requests(module: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Render and validate; any problem fails the module before a client exists."""
    params = module.params

    def make() -> dict[str, Any]:
        requests = render(
            spec,
            spec_module.foundation(module),
            params["ami_id"],
            params["launch_template"],
            params["launch_templates"],
            stacks=params["stacks_dir"],
        )
        validate(requests)
        return requests

    return spec_module.rendered(module, "PCS", (PcsRenderError, PcsRequestError), make)


def main() -> None:
    module, spec = spec_module.cluster_module("pcs_cluster", argument_spec(), ("foundation",))
    params = module.params
    result: dict[str, Any] = {"changed": False, "created": [], "deleted": []}
    if params["state"] == "present":
        requests = _requests(module, spec)
        spec_module.keep_rendered(module, result, requests, "PCS")
    pcs = client(module, "pcs", spec["region"])
    waiter = Waiter.of_module(module, "PCS", POLL_SECONDS, HINT)
    with reported(module, f"PCS cluster {spec['name']}"):
        if params["state"] == "present":
            result.update(present(module, pcs, result["requests"], waiter))
        else:
            result.update(absent(module, pcs, spec["name"], waiter))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
