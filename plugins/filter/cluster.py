# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Filters that find a cluster's hosts in an inventory made by the ec2_cluster plugin (or written by hand),
and that map a cluster spec and its foundation onto the inputs of the foundation role and the renderer.

Why a filter: launch_training, validate_cluster and nccl_acceptance all turn "the cluster called X" into
hosts the same way the inventory plugin named its groups (cluster_<name>, cluster_<name>_head, role_head), and
to say the same clear thing when the name matches no cluster or several heads. One function keeps the three
playbooks and the plugin in step: the group names come from the plugin's own module_utils.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from ansible.errors import AnsibleFilterError
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import storage
from ansible_collections.trainstack.cluster.plugins.module_utils.inventory.ec2_cluster_model import safe_group

CLUSTER_PREFIX = "cluster_"


def cluster_group(name: str, role: str = "") -> str:
    """The group the inventory plugin makes for a cluster (and for one node role of it)."""
    group = f"{CLUSTER_PREFIX}{safe_group(str(name))}"
    return f"{group}_{safe_group(str(role))}" if role else group


def _clusters(groups: Mapping[str, Sequence[str]]) -> list[str]:
    """Names of the clusters in the inventory, from their cluster_<name>_head groups (or _login, for a
    cluster whose Slurm controller is not one of its hosts)."""
    return sorted(
        {
            g[len(CLUSTER_PREFIX) : -len(f"_{role}")]
            for g in groups
            for role in ("head", "login")
            if g.startswith(CLUSTER_PREFIX) and g.endswith(f"_{role}")
        }
    )


def _named_cluster_hosts(groups: Mapping[str, Sequence[str]], cluster: str) -> tuple[str, list[str]]:
    """The group a named cluster's jobs are submitted from, and its hosts: the head group, else the login
    group. AWS PCS runs the Slurm controller itself, outside the account, so a PCS cluster has no head host
    and its login node group is where ``sbatch`` runs; ParallelCluster and HyperPod have a head."""
    for role in ("head", "login"):
        group = cluster_group(cluster, role)
        if groups.get(group):
            return group, list(groups[group])
    return cluster_group(cluster, "head"), []


def cluster_head(groups: Mapping[str, Sequence[str]], cluster: str = "") -> dict[str, str]:
    """The one host a cluster's jobs are submitted from: ``{host, error}``, where exactly one is empty.

    With a cluster name: its head, or its login node where it has no head (PCS). Without one, a
    hand-written inventory's ``head`` group wins, then the plugin's ``role_head`` (which holds the heads of
    every cluster it found, so more than one asks for a name).
    """
    if cluster:
        group, heads = _named_cluster_hosts(groups, cluster)
        if not heads:
            known = ", ".join(_clusters(groups)) or "none"
            login = cluster_group(cluster, "login")
            return {
                "host": "",
                "error": f"cluster={cluster}: no group {group} in the inventory (clusters: {known}), "
                f"nor {login}, the login nodes of a cluster whose Slurm controller AWS runs (PCS)",
            }
        source = f"Cluster {cluster} ({group})"
    else:
        heads = list(groups.get("head") or groups.get("role_head") or [])
        if not heads:
            return {"host": "", "error": "The inventory has no head host (group head or role_head)"}
        source = "The inventory"
    if len(heads) > 1:
        hint = (
            ""
            if cluster
            else f"; pick one with -e cluster=<name> (clusters: {', '.join(_clusters(groups)) or 'none'})"
        )
        return {
            "host": "",
            "error": f"{source} has {len(heads)} head hosts ({', '.join(heads)}), one is needed{hint}",
        }
    return {"host": heads[0], "error": ""}


def _subnet_cidrs(vpc_cidr: str) -> dict[str, str]:
    """A new VPC's subnets: the upper half for the (larger) private subnet, a small one at the start for
    the public subnet (NAT gateway, head node's address); a /16 gives the role's defaults, /24 and /17. The
    second quarter is the private subnet of a second zone, made only for EKS."""
    vpc = ipaddress.ip_network(vpc_cidr)
    return {
        "aws_foundation_vpc_cidr": str(vpc),
        "aws_foundation_public_subnet_cidr": str(next(vpc.subnets(new_prefix=min(vpc.prefixlen + 8, 28)))),
        "aws_foundation_private_subnet_cidr": str(list(vpc.subnets(prefixlen_diff=1))[1]),
        # EKS's second zone: the second quarter (a /16 gives the role's default, /18).
        "aws_foundation_second_private_subnet_cidr": str(list(vpc.subnets(prefixlen_diff=2))[1]),
    }


def _network_vars(network: Mapping[str, Any]) -> dict[str, Any]:
    if network["vpc"] == "existing":
        return {
            "aws_foundation_vpc_create": False,
            "aws_foundation_public_subnet_id": network["public_subnet_id"],
            "aws_foundation_private_subnet_id": network["private_subnet_id"],
        }
    return {
        "aws_foundation_vpc_create": True,
        **(_subnet_cidrs(network["cidr"]) if network.get("cidr") else {}),
    }


def _storage_vars(fsx: Mapping[str, Any] | None) -> dict[str, Any]:
    """FSx made by the foundation, so that the data outlives any one cluster; a data repository path names the
    (existing) bucket, which then is the cluster's data and bootstrap bucket."""
    if not fsx:
        return {"aws_foundation_fsx_enabled": False, "aws_foundation_fsx_link_bucket": False}
    found: dict[str, Any] = {
        "aws_foundation_fsx_enabled": True,
        "aws_foundation_fsx_deployment_type": fsx["deployment_type"],
        "aws_foundation_fsx_storage_capacity": fsx["storage_capacity_gib"],
        "aws_foundation_fsx_link_bucket": bool(fsx.get("data_repository_path")),
    }
    if fsx.get("per_unit_storage_throughput") is not None:
        found["aws_foundation_fsx_per_unit_storage_throughput"] = fsx["per_unit_storage_throughput"]
    if fsx.get("data_repository_path"):
        path = urlsplit(fsx["data_repository_path"])
        prefix = path.path.strip("/")
        found |= {
            "aws_foundation_bucket_name": path.netloc,
            "aws_foundation_bucket_create": False,
            "aws_foundation_fsx_s3_prefix": f"{prefix}/" if prefix else "",
            # The directory the launch's data default names (module_utils/cluster/storage.py).
            "aws_foundation_fsx_file_system_path": storage.file_system_path(fsx),
        }
    return found


# What a cluster can be launched with; each asks the foundation for its own IAM roles (and EKS for two zones).
ORCHESTRATORS = ("parallelcluster", "pcs", "batch", "hyperpod", "eks")


def _orchestrator(spec: Mapping[str, Any], orchestrator: str) -> str:
    """The orchestrator the foundation is made for: the one named, else HyperPod for a spec with a
    ``hyperpod`` section (read by nothing else), else ParallelCluster. The spec has no key that says EKS, so
    that one is named (``-e cluster_orchestrator=eks``); an unknown name is refused before any change."""
    chosen = orchestrator or ("hyperpod" if spec.get("hyperpod") is not None else "parallelcluster")
    if chosen not in ORCHESTRATORS:
        raise AnsibleFilterError(
            f"cluster_orchestrator: {chosen!r} is not an orchestrator the foundation knows; "
            f"it must be one of {', '.join(ORCHESTRATORS)}"
        )
    return chosen


def cluster_foundation_vars(spec: Mapping[str, Any], orchestrator: str = "") -> dict[str, Any]:
    """The aws_foundation role's variables for a checked cluster spec (defaults filled): the one place that
    says which part of the spec the foundation builds. The role checks them again before any AWS call."""
    return {
        "aws_foundation_cluster_name": spec["name"],
        "aws_foundation_region": spec["region"],
        "aws_foundation_availability_zone": spec["availability_zone"],
        "aws_foundation_orchestrator": _orchestrator(spec, orchestrator),
        "aws_foundation_placement_group": any(q.get("placement_group") for q in spec["queues"]),
        **_network_vars(spec["network"]),
        **_storage_vars((spec.get("shared_storage") or {}).get("fsx_lustre")),
    }


# aws_foundation_outputs key -> pcluster_config foundation key (what the foundation made, as the renderer
# names it). The bundle's sha256 and the accounting database do not come from the foundation.
FOUNDATION_OUTPUT_KEYS = {
    "public_subnet_id": "subnet_public",
    "private_subnet_id": "subnet_private",
    "security_group_id": "security_group",
    "bucket": "bucket",
    "instance_profile_arn": "instance_profile",
    "fsx_file_system_id": "fsx_file_system_id",
    "placement_group": "placement_group",
}
# Keys every record of a finished foundation has a value for.
REQUIRED_OUTPUTS = ("cluster_name", "region", "private_subnet_id", "security_group_id", "bucket")


def _check_outputs(outputs: Any, spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """Refuse a record that is not a finished foundation of this spec's cluster, naming the key: rendering
    another cluster's subnets or bucket would launch nodes into the wrong place."""
    if not isinstance(outputs, Mapping):
        raise AnsibleFilterError(
            f"foundation outputs must be a mapping (aws_foundation_outputs), not {type(outputs).__name__}"
        )
    for key in REQUIRED_OUTPUTS:
        if not outputs.get(key):
            raise AnsibleFilterError(
                f"foundation outputs: {key} is missing or empty; run cluster_foundation "
                "-e cluster_spec=<file> to completion first"
            )
    for key, spec_key in (("cluster_name", "name"), ("region", "region")):
        if outputs[key] != spec[spec_key]:
            raise AnsibleFilterError(
                f"foundation outputs: {key} is {outputs[key]!r} but the spec's {spec_key} is "
                f"{spec[spec_key]!r}: the record belongs to another cluster"
            )
    return outputs


def pcluster_foundation(
    outputs: Any,
    spec: Mapping[str, Any],
    bundle_sha256: str = "",
    database: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``foundation`` argument of pcluster_config from aws_foundation_outputs (checked against the spec):
    the one place that says which output feeds which part of the ParallelCluster configuration. Empty outputs
    (no FSx, no placement group, no public subnet of a given network) are left out, so the renderer applies
    its own rule for each."""
    checked = _check_outputs(outputs, spec)
    found = {target: checked[key] for key, target in FOUNDATION_OUTPUT_KEYS.items() if checked.get(key)}
    if bundle_sha256:
        found["bundle_sha256"] = bundle_sha256
    if database:
        found["database"] = dict(database)
    return found


class FilterModule:
    """trainstack.cluster inventory filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "cluster_group": cluster_group,
            "cluster_head": cluster_head,
            "cluster_foundation_vars": cluster_foundation_vars,
            "pcluster_foundation": pcluster_foundation,
        }
