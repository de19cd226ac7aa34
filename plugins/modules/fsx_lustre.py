#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module: an FSx for Lustre file system (and its S3 link) owned by one trainstack cluster.

Neither amazon.aws nor community.aws has an FSx module, so this one is small on purpose: it finds the file
system by the cluster's tags (the same tags the teardown looks for), creates it when absent, links it to S3
with a data repository association, and deletes it. It never resizes a file system: that takes hours and is
a decision for a person, so a difference is reported as a warning.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fsx_lustre
short_description: Create or delete an FSx for Lustre file system found by a cluster's tags
description:
  - Finds the C(LUSTRE) file system tagged C(trainstack:cluster=<cluster>) and C(Name=<name>); creates it when
    there is none (O(state=present)) or deletes it (O(state=absent)). A second run with the same arguments
    changes nothing.
  - An existing file system is never resized or reconfigured; where its storage, deployment type or throughput
    differs from the arguments, the module warns and leaves it alone.
  - With O(data_repository), links a directory of the file system to an S3 prefix through a data repository
    association (not available for the C(SCRATCH_1) deployment type); an association with the same file system
    path is kept as it is.
  - Supports check mode.
version_added: 0.2.0
author: trainstack maintainers (@trainstack)
options:
  state:
    description: C(present) creates the file system when missing; C(absent) deletes it.
    type: str
    choices: [present, absent]
    default: present
  cluster:
    description: Cluster name; the file system carries it as the C(trainstack:cluster) tag.
    type: str
    required: true
  name:
    description: The file system's C(Name) tag; with O(cluster), what the module looks it up by.
    type: str
    required: true
  deployment_type:
    description: FSx for Lustre deployment type.
    type: str
    choices: [SCRATCH_1, SCRATCH_2, PERSISTENT_1, PERSISTENT_2]
    default: PERSISTENT_2
  storage_capacity:
    description: Storage in GiB (1200, 2400 or a multiple of 2400; C(SCRATCH_1) also multiples of 3600).
    type: int
    default: 1200
  per_unit_storage_throughput:
    description: MB/s per TiB of storage; persistent deployment types only (C(PERSISTENT_1) 50, 100, 200;
      C(PERSISTENT_2) 125, 250, 500, 1000).
    type: int
  file_system_type_version:
    description: Lustre version of the file system.
    type: str
    default: "2.15"
  subnet_id:
    description: Subnet the file system is placed in; required with O(state=present).
    type: str
  security_group_ids:
    description: Security groups of the file system's network interfaces.
    type: list
    elements: str
    default: []
  tags:
    description: Further tags; C(trainstack:cluster) and C(Name) are always set.
    type: dict
    default: {}
  data_repository:
    description: Link a directory of the file system to an S3 prefix (a data repository association).
    type: dict
    suboptions:
      file_system_path:
        description: Directory on the file system, starting with C(/).
        type: str
        required: true
      data_repository_path:
        description: S3 location, C(s3://bucket/prefix/).
        type: str
        required: true
      import_events:
        description: S3 changes imported automatically.
        type: list
        elements: str
        choices: [NEW, CHANGED, DELETED]
        default: [NEW, CHANGED, DELETED]
      export_events:
        description: File system changes exported to S3 automatically (none by default).
        type: list
        elements: str
        choices: [NEW, CHANGED, DELETED]
        default: []
extends_documentation_fragment:
  - trainstack.cluster.cluster_module.wait
  - amazon.aws.common.modules
  - amazon.aws.region.modules
  - amazon.aws.boto3
notes:
  - O(wait) waits until a new file system is C(AVAILABLE), or a deleted one is gone; left out,
    O(poll_interval) is 15 seconds. A file system that exists already is not waited for.
"""

EXAMPLES = r"""
- name: Scratch space for a training cluster, linked to its data bucket
  trainstack.cluster.fsx_lustre:
    cluster: llm-a
    name: llm-a-fsx
    region: us-east-1
    deployment_type: PERSISTENT_2
    storage_capacity: 2400
    per_unit_storage_throughput: 250
    subnet_id: subnet-0123456789abcdef0
    security_group_ids: [sg-0123456789abcdef0]
    data_repository:
      file_system_path: /data
      data_repository_path: s3://llm-a-data/datasets/

- name: Delete it
  trainstack.cluster.fsx_lustre:
    cluster: llm-a
    name: llm-a-fsx
    region: us-east-1
    state: absent
"""

RETURN = r"""
file_system_id:
  description: Id of the file system; empty when there is none.
  returned: always
  type: str
  sample: fs-0123456789abcdef0
dns_name:
  description: DNS name clients mount.
  returned: always
  type: str
  sample: fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com
mount_name:
  description: Lustre mount name (C(<dns_name>@tcp:/<mount_name>)); empty where the service reports none.
  returned: always
  type: str
  sample: abcdef12
file_system:
  description: The file system as DescribeFileSystems returns it (snake_case keys, tags as a dict).
  returned: when a file system exists
  type: dict
data_repository_association_id:
  description: Id of the data repository association; empty without O(data_repository).
  returned: always
  type: str
  sample: dra-0123456789abcdef0
"""

import hashlib
from typing import Any

from ansible.module_utils.common.dict_transformations import camel_dict_to_snake_dict

try:
    from ansible_collections.amazon.aws.plugins.module_utils.modules import AnsibleAWSModule
except ImportError:  # pragma: no cover - amazon.aws is a dependency of this collection
    AnsibleAWSModule = None

from ansible_collections.trainstack.cluster.plugins.module_utils.aws import wait
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.client import client, reported
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.drift import Difference, drift, warn
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.errors import or_none

CLUSTER_TAG = "trainstack:cluster"
GONE = ("DELETING", "FAILED")
EVENTS = ["NEW", "CHANGED", "DELETED"]
POLL_SECONDS = 15


def wanted_tags(cluster: str, name: str, extra: dict[str, str]) -> dict[str, str]:
    """The tags a file system of this cluster carries; the cluster tag and Name win over O(tags)."""
    return {**extra, CLUSTER_TAG: cluster, "Name": name}


def client_token(cluster: str, name: str) -> str:
    """A retried create after a lost answer must not make a second file system: FSx keys on this token."""
    return "trainstack-" + hashlib.sha256(f"{cluster}/{name}".encode()).hexdigest()[:40]


def create_request(params: dict[str, Any]) -> dict[str, Any]:
    """CreateFileSystem's arguments, from the module's (a pure function: the unit tests check it against
    botocore's model of the FSx API)."""
    lustre: dict[str, Any] = {"DeploymentType": params["deployment_type"]}
    if params.get("per_unit_storage_throughput"):
        lustre["PerUnitStorageThroughput"] = params["per_unit_storage_throughput"]
    if params["deployment_type"] == "PERSISTENT_2":
        lustre["DataCompressionType"] = "LZ4"
    tags = wanted_tags(params["cluster"], params["name"], params.get("tags") or {})
    return {
        "ClientRequestToken": client_token(params["cluster"], params["name"]),
        "FileSystemType": "LUSTRE",
        "FileSystemTypeVersion": params["file_system_type_version"],
        "StorageCapacity": params["storage_capacity"],
        "StorageType": "SSD",
        "SubnetIds": [params["subnet_id"]],
        "SecurityGroupIds": list(params.get("security_group_ids") or []),
        "LustreConfiguration": lustre,
        "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())],
    }


def association_request(file_system_id: str, params: dict[str, Any]) -> dict[str, Any]:
    """CreateDataRepositoryAssociation's arguments (checked against botocore's model by the unit tests)."""
    link = params["data_repository"]
    policy: dict[str, Any] = {}
    if link.get("import_events"):
        policy["AutoImportPolicy"] = {"Events": list(link["import_events"])}
    if link.get("export_events"):
        policy["AutoExportPolicy"] = {"Events": list(link["export_events"])}
    request: dict[str, Any] = {
        "FileSystemId": file_system_id,
        "FileSystemPath": link["file_system_path"],
        "DataRepositoryPath": link["data_repository_path"],
        "BatchImportMetaDataOnCreate": True,
        "ClientRequestToken": client_token(file_system_id, link["file_system_path"]),
        "Tags": [
            {"Key": CLUSTER_TAG, "Value": params["cluster"]},
            {"Key": "Name", "Value": params["name"]},
        ],
    }
    if policy:
        request["S3"] = policy
    return request


def tags_of(file_system: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in file_system.get("Tags") or []}


def find(client: Any, cluster: str, name: str) -> dict[str, Any] | None:
    """The cluster's live Lustre file system of this name, if any (tags are the only key the teardown has)."""
    for page in client.get_paginator("describe_file_systems").paginate():
        for file_system in page.get("FileSystems", []):
            tags = tags_of(file_system)
            if (
                file_system.get("FileSystemType") == "LUSTRE"
                and tags.get(CLUSTER_TAG) == cluster
                and tags.get("Name") == name
                and file_system.get("Lifecycle") not in GONE
            ):
                return file_system
    return None


def describe(fsx: Any, file_system_id: str) -> dict[str, Any] | None:
    found = or_none(fsx, lambda: fsx.describe_file_systems(FileSystemIds=[file_system_id])["FileSystems"])
    return found[0] if found else None


def wait_for(waiter: wait.Waiter, fsx: Any, file_system_id: str, gone: bool) -> dict[str, Any] | None:
    """Poll until the file system is AVAILABLE (or gone); no Lifecycle in the answer counts as done."""
    return waiter.until(
        f"file system {file_system_id}",
        lambda: describe(fsx, file_system_id),
        wait.GONE if gone else "AVAILABLE",
        status=lambda found: found.get("Lifecycle", "AVAILABLE"),
        failed=() if gone else GONE,
        reason=lambda found: (found.get("FailureDetails") or {}).get("Message") or "-",
    )


def settings_drift(file_system: dict[str, Any], params: dict[str, Any]) -> list[Difference]:
    """Settings of an existing file system that differ from the arguments given (reported, never changed)."""
    lustre = file_system.get("LustreConfiguration") or {}
    found = {
        "storage_capacity": file_system.get("StorageCapacity"),
        "deployment_type": lustre.get("DeploymentType"),
        "per_unit_storage_throughput": lustre.get("PerUnitStorageThroughput"),
    }
    return drift(found, {key: params[key] for key in found if params.get(key)})


def associations(client: Any, file_system_id: str) -> list[dict[str, Any]]:
    """The file system's data repository associations (botocore has no paginator for this call)."""
    found: list[dict[str, Any]] = []
    request: dict[str, Any] = {"Filters": [{"Name": "file-system-id", "Values": [file_system_id]}]}
    while True:
        page = client.describe_data_repository_associations(**request)
        found.extend(page.get("Associations", []))
        if not page.get("NextToken"):
            return found
        request["NextToken"] = page["NextToken"]


def ensure_association(module: Any, client: Any, file_system_id: str) -> tuple[bool, str]:
    """Link the file system path to S3 unless an association for that path exists already."""
    link = module.params["data_repository"]
    if not link:
        return False, ""
    for association in associations(client, file_system_id) if file_system_id else []:
        if association.get("FileSystemPath") == link["file_system_path"]:
            if association.get("DataRepositoryPath") != link["data_repository_path"]:
                module.warn(
                    f"{link['file_system_path']} is linked to "
                    f"{association.get('DataRepositoryPath')}, not {link['data_repository_path']}; "
                    "left as it is"
                )
            return False, association["AssociationId"]
    if module.check_mode:
        return True, ""
    made = client.create_data_repository_association(**association_request(file_system_id, module.params))
    return True, made["Association"]["AssociationId"]


def result(file_system: dict[str, Any] | None, changed: bool, association_id: str = "") -> dict[str, Any]:
    found = file_system or {}
    out: dict[str, Any] = {
        "changed": changed,
        "file_system_id": found.get("FileSystemId", ""),
        "dns_name": found.get("DNSName", ""),
        "mount_name": (found.get("LustreConfiguration") or {}).get("MountName", ""),
        "data_repository_association_id": association_id,
    }
    if file_system:
        out["file_system"] = camel_dict_to_snake_dict(file_system, ignore_list=["Tags"])
        out["file_system"]["tags"] = tags_of(file_system)
    return out


def present(module: Any, client: Any, waiter: wait.Waiter) -> dict[str, Any]:
    params = module.params
    if not params["subnet_id"]:
        module.fail_json(
            msg="subnet_id: required with state=present (the subnet the file system is placed in)"
        )
    file_system = find(client, params["cluster"], params["name"])
    changed = False
    if file_system is None:
        changed = True
        if module.check_mode:
            return result(None, True, "")
        made = client.create_file_system(**create_request(params))["FileSystem"]
        file_system = wait_for(waiter, client, made["FileSystemId"], gone=False) if params["wait"] else made
    else:
        warn(module, f"FSx file system {file_system['FileSystemId']}", settings_drift(file_system, params))
    linked, association_id = ensure_association(module, client, (file_system or {}).get("FileSystemId", ""))
    return result(file_system, changed or linked, association_id)


def absent(module: Any, client: Any, waiter: wait.Waiter) -> dict[str, Any]:
    file_system = find(client, module.params["cluster"], module.params["name"])
    if file_system is None:
        return result(None, False)
    if not module.check_mode:
        client.delete_file_system(FileSystemId=file_system["FileSystemId"])
        if module.params["wait"]:
            wait_for(waiter, client, file_system["FileSystemId"], gone=True)
    return {**result(file_system, True), "file_system_id": file_system["FileSystemId"]}


def argument_spec() -> dict[str, Any]:
    events = {"type": "list", "elements": "str", "choices": EVENTS}
    return {
        "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        "cluster": {"type": "str", "required": True},
        "name": {"type": "str", "required": True},
        "deployment_type": {
            "type": "str",
            "choices": ["SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2"],
            "default": "PERSISTENT_2",
        },
        "storage_capacity": {"type": "int", "default": 1200},
        "per_unit_storage_throughput": {"type": "int"},
        "file_system_type_version": {"type": "str", "default": "2.15"},
        "subnet_id": {"type": "str"},
        "security_group_ids": {"type": "list", "elements": "str", "default": []},
        "tags": {"type": "dict", "default": {}},
        "data_repository": {
            "type": "dict",
            "options": {
                "file_system_path": {"type": "str", "required": True},
                "data_repository_path": {"type": "str", "required": True},
                "import_events": {**events, "default": EVENTS},
                "export_events": {**events, "default": []},
            },
        },
        **wait.argument_spec(),
    }


def main() -> None:
    if AnsibleAWSModule is None:
        from ansible.module_utils.basic import AnsibleModule

        AnsibleModule(argument_spec={}, bypass_checks=True).fail_json(
            msg="trainstack.cluster.fsx_lustre needs the amazon.aws collection (its module_utils): install it"
        )
    module = AnsibleAWSModule(argument_spec=argument_spec(), supports_check_mode=True)
    for problem in wait.problems(module.params):
        module.fail_json(msg=problem)
    fsx = client(module, "fsx")
    # Run again, the module finds the file system by its tags and does not wait: point at the CLI instead.
    waiter = wait.Waiter.of_module(
        module, "FSx", POLL_SECONDS, "FSx goes on; watch it with aws fsx describe-file-systems"
    )
    with reported(module, f"FSx for Lustre file system {module.params['name']}"):
        outcome = (
            present(module, fsx, waiter)
            if module.params["state"] == "present"
            else absent(module, fsx, waiter)
        )
    module.exit_json(**outcome)


if __name__ == "__main__":
    main()
