# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Render a normalised cluster spec (cluster/cluster_spec.py) as a ParallelCluster 3 configuration.

Why a separate step: the spec says what the cluster is; where it lives (subnets, security group, bucket,
instance profile, placement group, accounting database) is only known once the foundation exists. Those come
in as one `foundation` mapping, the outputs of the foundation playbook, so the same spec renders for any
account. Key names are ParallelCluster 3's (its cluster_schema, checked by scripts/pcluster_validate.py with
ParallelCluster's own schema classes); nothing here calls AWS.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import resilience, storage

# The stack OS ids the image factory builds -> ParallelCluster's Image.Os.
PCLUSTER_OS = {"ubuntu-22.04": "ubuntu2204", "ubuntu-24.04": "ubuntu2404", "amzn-2023": "alinux2023"}
CAPACITY_TYPE = {"on_demand": "ONDEMAND", "spot": "SPOT", "capacity_block": "CAPACITY_BLOCK"}
# Where every node's OnNodeConfigured action lives in the cluster's bucket (playbooks/files/node_bootstrap.sh,
# uploaded by playbooks/node_bundle.yml). Its arguments: the node role, then the bundle it installs and the
# bundle's sha256. The bundle is stored under its own digest, so uploading a new one never changes what the
# nodes of a running cluster fetch.
BOOTSTRAP_KEY = "trainstack/bootstrap.sh"
BUNDLE_PREFIX = "trainstack/bundles/"
SHA256 = re.compile(r"^[0-9a-f]{64}$")
FOUNDATION_KEYS = (
    "subnet_public",
    "subnet_private",
    "security_group",
    "bucket",
    "bundle_sha256",
    "instance_profile",
    "iam_policies",
    "placement_group",
    "database",
    "fsx_file_system_id",
)
DATABASE_KEYS = ("uri", "user_name", "password_secret_arn")


class RenderError(ValueError):
    """The foundation lacks what this spec needs; the message names the key and why it is needed."""


def _subnets(spec: Mapping[str, Any], foundation: Mapping[str, Any]) -> tuple[str, str]:
    """(public, private) subnet ids: the spec's own for an existing VPC, else the foundation's new ones."""
    network = spec["network"]
    if network["vpc"] == "existing":
        return network["public_subnet_id"], network["private_subnet_id"]
    missing = [key for key in ("subnet_public", "subnet_private") if not foundation.get(key)]
    if missing:
        raise RenderError(
            f"foundation.{missing[0]} is required: network.vpc is new, so the foundation's subnets are used"
        )
    return foundation["subnet_public"], foundation["subnet_private"]


def _iam(foundation: Mapping[str, Any], *, s3_access: bool = True) -> dict[str, Any] | None:
    """An instance profile is used as is (ParallelCluster refuses S3Access beside it); otherwise read access
    to the bucket (for the bootstrap script) plus the foundation's policies. Login pools take no S3Access."""
    if foundation.get("instance_profile"):
        return {"InstanceProfile": foundation["instance_profile"]}
    iam: dict[str, Any] = {}
    if s3_access:
        iam["S3Access"] = [{"BucketName": foundation["bucket"], "EnableWriteAccess": False}]
    policies = foundation.get("iam_policies") or []
    if policies:
        iam["AdditionalIamPolicies"] = [{"Policy": arn} for arn in policies]
    return iam or None


def _bootstrap(foundation: Mapping[str, Any], role: str, extra: list[str] | None = None) -> dict[str, Any]:
    """The node's role first (the script also reads ParallelCluster's node type), then the checked bundle,
    then the playbook variables this node's role needs (`-e KEY=VALUE`)."""
    bucket, digest = foundation["bucket"], foundation["bundle_sha256"]
    bundle = f"s3://{bucket}/{BUNDLE_PREFIX}{digest}.tar.gz"
    args = [role, "--bundle", bundle, "--sha256", digest, *(extra or [])]
    return {"OnNodeConfigured": {"Script": f"s3://{bucket}/{BOOTSTRAP_KEY}", "Args": args}}


def _security_groups(foundation: Mapping[str, Any]) -> dict[str, Any]:
    group = foundation.get("security_group")
    return {"AdditionalSecurityGroups": [group]} if group else {}


def _head_node(spec: Mapping[str, Any], foundation: Mapping[str, Any], subnet: str) -> dict[str, Any]:
    head = spec["head_node"]
    node: dict[str, Any] = {
        "InstanceType": head["instance_type"],
        "Networking": {"SubnetId": subnet, **_security_groups(foundation)},
    }
    if head.get("ssh_key_name"):
        node["Ssh"] = {"KeyName": head["ssh_key_name"]}
    iam = _iam(foundation)
    if iam:
        node["Iam"] = iam
    # The head node writes the node_health prolog and epilog into /opt/slurm, which every node shares.
    node["CustomActions"] = _bootstrap(
        foundation, "head", resilience.node_bootstrap_args(resilience.of(spec))
    )
    return node


def _login_nodes(spec: Mapping[str, Any], foundation: Mapping[str, Any], subnet: str) -> dict[str, Any]:
    login = spec["login_nodes"]
    pool: dict[str, Any] = {
        "Name": "login",
        "InstanceType": login["instance_type"],
        "Count": login["count"],
        "Networking": {"SubnetIds": [subnet], **_security_groups(foundation)},
    }
    # No Ssh.KeyName: ParallelCluster 3.15 and later refuse it on login pools (they take the head node's key).
    iam = _iam(foundation, s3_access=False)
    if iam:
        pool["Iam"] = iam
    pool["CustomActions"] = _bootstrap(foundation, "login")
    return {"Pools": [pool]}


def _compute_resource(queue: Mapping[str, Any]) -> dict[str, Any]:
    resource: dict[str, Any] = {
        "Name": queue["instance_type"].replace(".", "-"),
        "InstanceType": queue["instance_type"],
        "MinCount": queue["min_count"],
        "MaxCount": queue["max_count"],
        "Efa": {"Enabled": queue["efa"]},
    }
    if queue.get("capacity_reservation_id"):
        resource["CapacityReservationTarget"] = {"CapacityReservationId": queue["capacity_reservation_id"]}
    return resource


def _queue(
    queue: Mapping[str, Any], foundation: Mapping[str, Any], subnet: str, section: Mapping[str, Any]
) -> dict[str, Any]:
    networking: dict[str, Any] = {"SubnetIds": [subnet], **_security_groups(foundation)}
    if queue["placement_group"]:
        group = foundation.get("placement_group")
        networking["PlacementGroup"] = {"Enabled": True, **({"Name": group} if group else {})}
    rendered: dict[str, Any] = {
        "Name": queue["name"],
        "CapacityType": CAPACITY_TYPE[queue["capacity_type"]],
        "Networking": networking,
        "ComputeResources": [_compute_resource(queue)],
        **resilience.pcluster_queue(section),
    }
    iam = _iam(foundation)
    if iam:
        rendered["Iam"] = iam
    rendered["CustomActions"] = _bootstrap(foundation, "compute")
    return rendered


def _slurm_settings(spec: Mapping[str, Any], foundation: Mapping[str, Any]) -> dict[str, Any]:
    """Accounting needs an external database (ParallelCluster creates none): the foundation names it."""
    if not spec["slurm_accounting"]:
        return {}
    database = foundation.get("database") or {}
    missing = [key for key in DATABASE_KEYS if not database.get(key)]
    if missing:
        raise RenderError(
            f"foundation.database.{missing[0]} is required: slurm_accounting is on and ParallelCluster "
            "stores accounting in an external database (uri, user_name, password_secret_arn)"
        )
    return {
        "Database": {
            "Uri": database["uri"],
            "UserName": database["user_name"],
            "PasswordSecretArn": database["password_secret_arn"],
        }
    }


def _fsx(fsx: Mapping[str, Any]) -> dict[str, Any]:
    """PERSISTENT_2 links S3 only through a data repository association; the others take ImportPath."""
    settings: dict[str, Any] = {
        "StorageCapacity": fsx["storage_capacity_gib"],
        "DeploymentType": fsx["deployment_type"],
    }
    if fsx.get("per_unit_storage_throughput") is not None:
        settings["PerUnitStorageThroughput"] = fsx["per_unit_storage_throughput"]
    path = fsx.get("data_repository_path")
    if path and fsx["deployment_type"] == "PERSISTENT_2":
        linked = fsx.get("data_repository_file_system_path", "/")
        settings["DataRepositoryAssociations"] = [
            {"Name": "data", "DataRepositoryPath": path, "FileSystemPath": linked}
        ]
    elif path:
        settings["ImportPath"] = path
    return {
        "Name": "fsx",
        "StorageType": "FsxLustre",
        "MountDir": fsx["mount_dir"],
        "FsxLustreSettings": settings,
    }


def _existing_fsx(fsx: Mapping[str, Any], file_system_id: str) -> dict[str, Any]:
    """The file system the foundation made (it outlives the cluster, with its data repository link)."""
    return {
        "Name": "fsx",
        "StorageType": "FsxLustre",
        "MountDir": fsx["mount_dir"],
        "FsxLustreSettings": {"FileSystemId": file_system_id},
    }


def _shared_storage(spec: Mapping[str, Any], fsx_id: str | None = None) -> list[dict[str, Any]]:
    storage = spec["shared_storage"]
    found = []
    if storage.get("fsx_lustre"):
        fsx = storage["fsx_lustre"]
        found.append(_existing_fsx(fsx, fsx_id) if fsx_id else _fsx(fsx))
    if storage["efs_home"]:
        found.append(
            {"Name": "home", "StorageType": "Efs", "MountDir": "/home", "EfsSettings": {"Encrypted": True}}
        )
    return found


def _storage_tags(spec: Mapping[str, Any], foundation: Mapping[str, Any]) -> dict[str, str]:
    """Where data and checkpoints go (cluster/storage.py); ParallelCluster gives the cluster's tags to every
    instance, where the ec2_cluster inventory reads them for the launch. A file system ParallelCluster makes
    itself links S3 at its root unless the spec names the directory (PERSISTENT_2's association only)."""
    fsx = spec["shared_storage"].get("fsx_lustre") or {}
    own = bool(fsx) and not foundation.get("fsx_file_system_id")
    at_root = own and (
        fsx["deployment_type"] != "PERSISTENT_2" or "data_repository_file_system_path" not in fsx
    )
    return storage.tags(spec, import_at_root=at_root)


def _storage_problem(spec: Mapping[str, Any], foundation: Mapping[str, Any]) -> str:
    """ImportPath, the one link of a file system ParallelCluster makes of a type other than PERSISTENT_2,
    imports at the root: a named directory could not be honoured."""
    fsx = spec["shared_storage"].get("fsx_lustre") or {}
    if (
        fsx
        and not foundation.get("fsx_file_system_id")
        and fsx["deployment_type"] != "PERSISTENT_2"
        and "data_repository_file_system_path" in fsx
    ):
        return (
            "shared_storage.fsx_lustre.data_repository_file_system_path: a "
            f"{fsx['deployment_type']} file system ParallelCluster makes imports data_repository_path at its "
            "root (ImportPath); remove the key, or give the foundation's file system (fsx_file_system_id)"
        )
    return ""


def _monitoring(spec: Mapping[str, Any]) -> dict[str, Any]:
    enabled = spec["monitoring"]
    return {
        "DetailedMonitoring": enabled,
        "Logs": {"CloudWatch": {"Enabled": enabled}},
        "Dashboards": {"CloudWatch": {"Enabled": enabled}},
    }


def _ami(spec: Mapping[str, Any], ami_id: str | None) -> str:
    if ami_id:
        return ami_id
    if spec["image"].get("ami_id"):
        return spec["image"]["ami_id"]
    raise RenderError(
        "image.tags: the AMI is found by its tags in AWS; look it up (amazon.aws.ec2_ami_info) and pass "
        "its id as ami_id"
    )


def render(
    spec: Mapping[str, Any], foundation: Mapping[str, Any], ami_id: str | None = None
) -> dict[str, Any]:
    """The ParallelCluster 3 configuration of a normalised spec, as data (dump it as YAML)."""
    unknown = sorted(set(foundation) - set(FOUNDATION_KEYS))
    if unknown:
        raise RenderError(f"foundation.{unknown[0]} is not a known key (known: {', '.join(FOUNDATION_KEYS)})")
    if not foundation.get("bucket"):
        raise RenderError(
            "foundation.bucket is required: every node's OnNodeConfigured script is read from it"
        )
    if not SHA256.match(str(foundation.get("bundle_sha256") or "")):
        raise RenderError(
            "foundation.bundle_sha256 must be the 64 lowercase hex digits of the node bundle's sha256 "
            "(playbooks/node_bundle.yml prints it): every node checks the bundle it installs against it"
        )
    section = resilience.of(spec)
    refused = resilience.pcluster_problems(section)
    if refused:
        raise RenderError(refused[0])
    problem = _storage_problem(spec, foundation)
    if problem:
        raise RenderError(problem)
    public, private = _subnets(spec, foundation)
    config: dict[str, Any] = {
        "Region": spec["region"],
        "Image": {"Os": PCLUSTER_OS[spec["image"]["os"]], "CustomAmi": _ami(spec, ami_id)},
        "HeadNode": _head_node(spec, foundation, public),
    }
    if spec.get("login_nodes"):
        config["LoginNodes"] = _login_nodes(spec, foundation, public)
    scheduling: dict[str, Any] = {"Scheduler": "slurm"}
    settings = _slurm_settings(spec, foundation)
    if settings:
        scheduling["SlurmSettings"] = settings
    scheduling["SlurmQueues"] = [_queue(queue, foundation, private, section) for queue in spec["queues"]]
    config["Scheduling"] = scheduling
    storage = _shared_storage(spec, foundation.get("fsx_file_system_id"))
    if storage:
        config["SharedStorage"] = storage
    config["Monitoring"] = _monitoring(spec)
    tags = {"trainstack:stack": spec["image"]["stack"], **_storage_tags(spec, foundation)}
    config["Tags"] = [{"Key": key, "Value": value} for key, value in tags.items()]
    return config
