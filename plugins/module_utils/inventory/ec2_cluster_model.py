# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Pure model of the trainstack.cluster.ec2_cluster inventory: no AWS calls, no Ansible objects.

Everything that decides *what* the inventory holds (which instances belong to which cluster, under which
role and queue, with which groups and host variables) lives here so that it can be unit-tested with plain
dictionaries, and so that the cached path can rebuild the inventory from stored records without touching
AWS or templating anything per host.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from ansible_collections.trainstack.cluster.plugins.module_utils.aws.cluster_tags import storage_from_tags
from ansible_collections.trainstack.cluster.plugins.module_utils.catalog.instance_catalog import (
    default as default_catalog,
)

KINDS: tuple[str, ...] = ("parallelcluster", "pcs", "hyperpod", "eks", "tagged")
EC2_KINDS: tuple[str, ...] = ("parallelcluster", "pcs", "eks", "tagged")
ROLES: tuple[str, ...] = ("head", "login", "compute")
HOSTNAME_CHOICES: tuple[str, ...] = (
    "private-dns-name",
    "private-ip-address",
    "instance-id",
    "slurm-node-name",
)

PC_CLUSTER_TAG = "parallelcluster:cluster-name"
PC_NODE_TYPE_TAG = "parallelcluster:node-type"
PC_QUEUE_TAG = "parallelcluster:queue-name"
PC_COMPUTE_RESOURCE_TAG = "parallelcluster:compute-resource-name"
PCS_CLUSTER_TAG = "aws:pcs:cluster-id"
PCS_NODE_GROUP_TAG = "aws:pcs:compute-node-group-id"
# What EKS writes on the instances of a managed node group.
EKS_CLUSTER_TAG = "eks:cluster-name"
EKS_NODE_GROUP_TAG = "eks:nodegroup-name"

# ParallelCluster writes these node types; anything else (a future type) keeps its own lower-cased name so
# that it is visible rather than silently filed as compute.
_PC_ROLE = {"HeadNode": "head", "LoginNode": "login", "Compute": "compute"}
_TAGGED_ROLE = {
    "head": "head",
    "headnode": "head",
    "controller": "head",
    "login": "login",
    "loginnode": "login",
    "compute": "compute",
    "worker": "compute",
}
_UNSAFE_GROUP_CHARS = re.compile(r"[^A-Za-z0-9_]")
_RECORD_VERSION = 2  # 2: nodes carry the cluster's storage defaults


class Ec2ClusterError(Exception):
    """A user-facing problem (bad option, AWS refused, nothing found); the plugin re-raises it for Ansible."""


@dataclass(slots=True)
class Node:
    """One host of one cluster: the only per-host data that is fetched, cached and turned into variables.

    Kept flat and small on purpose: the cached path stores a list of these as rows and rebuilds the whole
    inventory from them, so every extra field costs on every run.
    """

    instance_id: str
    instance_type: str
    region: str
    cluster_name: str
    cluster_kind: str
    role: str
    availability_zone: str | None = None
    private_ip: str | None = None
    private_dns: str | None = None
    queue: str | None = None
    compute_resource: str | None = None
    slurm_node_name: str | None = None
    cluster_id: str | None = None
    tags: dict[str, str] | None = None
    # Where the cluster keeps data and checkpoints: the tags a spec'd cluster carries (aws/cluster_tags.py).
    storage: dict[str, str] | None = None

    def to_row(self) -> list[object]:
        """Serialise as a positional row; JSON of rows is about half the size of JSON of dicts."""
        return [
            self.instance_id,
            self.instance_type,
            self.region,
            self.cluster_name,
            self.cluster_kind,
            self.role,
            self.availability_zone,
            self.private_ip,
            self.private_dns,
            self.queue,
            self.compute_resource,
            self.slurm_node_name,
            self.cluster_id,
            self.tags,
            self.storage,
        ]


@dataclass(slots=True, frozen=True)
class TypeFacts:
    """Accelerator and network facts of one instance type, asked once per type per run."""

    gpu_count: int = 0
    gpu_model: str | None = None
    gpu_memory_mib: int | None = None
    efa_interfaces: int = 0
    source: str = "api"

    def to_row(self) -> list[object]:
        """Positional form for the inventory cache."""
        return [self.gpu_count, self.gpu_model, self.gpu_memory_mib, self.efa_interfaces, self.source]


def catalog_type_facts(instance_type: str) -> TypeFacts | None:
    """Fallback facts from the instance catalog (stacks/instance_types.yml) for a type describe_instance_types
    does not return (too new for the region or endpoint, or the call is not allowed): the API answer always
    wins when there is one. The catalog's own machines (lab, local) are not EC2 types and give nothing."""
    entry = default_catalog().find(ec2_type_name(instance_type))
    if entry is None or entry.family is None:
        return None
    return TypeFacts(
        entry.gpu_count or 0, entry.gpu_model, entry.gpu_memory_mib, entry.efa_interfaces, "catalog"
    )


@dataclass(slots=True, frozen=True)
class SourceFilter:
    """Which EC2 instances count as cluster nodes: the kinds asked for, the cluster names, the tag keys."""

    kinds: tuple[str, ...]
    cluster_names: frozenset[str] = frozenset()
    tagged_cluster_tag: str | None = None
    tagged_role_tag: str | None = None
    tagged_queue_tag: str | None = None
    pcs_login_node_groups: frozenset[str] = frozenset()
    slurm_node_name_tag: str | None = None
    include_tags: bool = False


@dataclass(slots=True)
class Plan:
    """The finished inventory as plain data: what the plugin hands to InventoryData, nothing more.

    `hostvars` is every variable of every host (what a play sees, and what compose/groups template
    against); `host_only` and `groupvars` are the same values split so that a fact shared by a whole group
    (instance type facts, cluster name, region) is set once on the group instead of once per host. Each
    set_variable goes through ansible-core's variable visitor, so this split is most of the cached-path time.
    """

    hostvars: dict[str, dict[str, object]] = field(default_factory=dict)
    host_only: dict[str, dict[str, object]] = field(default_factory=dict)
    groupvars: dict[str, dict[str, object]] = field(default_factory=dict)
    groups: dict[str, list[str]] = field(default_factory=dict)
    children: dict[str, list[str]] = field(default_factory=dict)
    duplicates: list[str] = field(default_factory=list)


def node_from_row(row: Sequence[object]) -> Node:
    """Inverse of Node.to_row, used on the cached path."""
    return Node(*row)  # type: ignore[arg-type]


def facts_from_row(row: Sequence[object]) -> TypeFacts:
    """Inverse of TypeFacts.to_row."""
    return TypeFacts(*row)  # type: ignore[arg-type]


def pack_records(nodes: Iterable[Node], facts: Mapping[str, TypeFacts]) -> dict[str, object]:
    """What goes into Ansible's inventory cache: rows, not objects, with a version to reject old layouts."""
    return {
        "version": _RECORD_VERSION,
        "nodes": [node.to_row() for node in nodes],
        "types": {name: fact.to_row() for name, fact in facts.items()},
    }


def unpack_records(data: object) -> tuple[list[Node], dict[str, TypeFacts]] | None:
    """Read a cache entry back; None when it was written by another layout so the caller refetches."""
    if not isinstance(data, Mapping) or data.get("version") != _RECORD_VERSION:
        return None
    nodes = [node_from_row(row) for row in data.get("nodes", [])]
    facts = {name: facts_from_row(row) for name, row in data.get("types", {}).items()}
    return nodes, facts


def ec2_type_name(instance_type: str) -> str:
    """HyperPod names types `ml.p5.48xlarge`; describe_instance_types knows them without the `ml.` prefix."""
    return instance_type[3:] if instance_type.startswith("ml.") else instance_type


def facts_from_instance_type(info: Mapping[str, object]) -> TypeFacts:
    """Reduce one describe_instance_types entry to the four numbers the inventory publishes."""
    gpu_info = info.get("GpuInfo") or {}
    gpus = (gpu_info.get("Gpus") or []) if isinstance(gpu_info, Mapping) else []
    count = sum(int(gpu.get("Count", 0)) for gpu in gpus)
    model = gpus[0].get("Name") if gpus else None
    memory = gpus[0].get("MemoryInfo", {}).get("SizeInMiB") if gpus else None
    network = info.get("NetworkInfo") or {}
    efa = 0
    if isinstance(network, Mapping) and network.get("EfaSupported"):
        efa = int((network.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 1))
    return TypeFacts(count, model, memory, efa, "api")


def tag_dict(tags: Iterable[Mapping[str, str]] | None) -> dict[str, str]:
    """EC2 answers tags as a list of Key/Value pairs; everything here looks them up by key."""
    return {tag["Key"]: tag["Value"] for tag in tags or ()}


def slurm_name_from_address(private_dns: str | None, private_ip: str | None) -> str | None:
    """HyperPod names Slurm nodes after the EC2 host name (`ip-10-1-2-3`), so it follows from the address."""
    if private_dns:
        return private_dns.split(".", 1)[0]
    if private_ip:
        return "ip-" + private_ip.replace(".", "-")
    return None


def _role_from_tagged(value: str | None) -> str:
    """User-chosen role tags vary in spelling; map the usual ones and call the rest compute."""
    if not value:
        return "compute"
    return _TAGGED_ROLE.get(value.strip().lower(), "compute")


def _identify(
    tags: Mapping[str, str], flt: SourceFilter
) -> tuple[str, str, str, str | None, str | None] | None:
    """Return (kind, cluster, role, queue, compute resource) for a tagged instance, or None if not ours."""
    if "parallelcluster" in flt.kinds and PC_CLUSTER_TAG in tags:
        node_type = tags.get(PC_NODE_TYPE_TAG, "Compute")
        role = _PC_ROLE.get(node_type, node_type.lower())
        return (
            "parallelcluster",
            tags[PC_CLUSTER_TAG],
            role,
            tags.get(PC_QUEUE_TAG),
            tags.get(PC_COMPUTE_RESOURCE_TAG),
        )
    if "pcs" in flt.kinds and PCS_CLUSTER_TAG in tags:
        group = tags.get(PCS_NODE_GROUP_TAG)
        role = "login" if group in flt.pcs_login_node_groups else "compute"
        return ("pcs", tags[PCS_CLUSTER_TAG], role, group, None)
    if "eks" in flt.kinds and EKS_CLUSTER_TAG in tags:
        # Every node of a managed node group is a worker: EKS runs the control plane outside the account.
        return ("eks", tags[EKS_CLUSTER_TAG], "compute", tags.get(EKS_NODE_GROUP_TAG), None)
    if "tagged" in flt.kinds and flt.tagged_cluster_tag and flt.tagged_cluster_tag in tags:
        role = _role_from_tagged(tags.get(flt.tagged_role_tag) if flt.tagged_role_tag else None)
        queue = tags.get(flt.tagged_queue_tag) if flt.tagged_queue_tag else None
        return ("tagged", tags[flt.tagged_cluster_tag], role, queue, None)
    return None


def node_from_ec2_instance(instance: Mapping[str, object], region: str, flt: SourceFilter) -> Node | None:
    """Turn one describe_instances entry into a Node, or None when it is not a node of a wanted cluster.

    The server-side filters already narrowed the answer, but one call serves several kinds, so the exact
    decision (and the cluster-name filter across kinds) is taken here.
    """
    tags = tag_dict(instance.get("Tags"))  # type: ignore[arg-type]
    identity = _identify(tags, flt)
    if identity is None:
        return None
    kind, cluster, role, queue, resource = identity
    if flt.cluster_names and cluster not in flt.cluster_names:
        return None
    placement = instance.get("Placement") or {}
    slurm = tags.get(flt.slurm_node_name_tag) if flt.slurm_node_name_tag else None
    return Node(
        instance_id=str(instance["InstanceId"]),
        instance_type=str(instance["InstanceType"]),
        region=region,
        cluster_name=cluster,
        cluster_kind=kind,
        role=role,
        availability_zone=placement.get("AvailabilityZone") if isinstance(placement, Mapping) else None,
        private_ip=instance.get("PrivateIpAddress") or None,  # type: ignore[arg-type]
        private_dns=instance.get("PrivateDnsName") or None,  # type: ignore[arg-type]
        queue=queue,
        compute_resource=resource,
        slurm_node_name=slurm,
        cluster_id=tags.get(PCS_CLUSTER_TAG) if kind == "pcs" else None,
        tags=tags if flt.include_tags else None,
        storage=storage_from_tags(tags) or None,
    )


def hyperpod_cluster_id(cluster_arn: str) -> str:
    """The SSM target uses the short cluster id, the last path element of the cluster ARN."""
    return cluster_arn.rsplit("/", 1)[-1]


def node_from_hyperpod(
    cluster_name: str,
    cluster_id: str,
    region: str,
    summary: Mapping[str, object],
    details: Mapping[str, object] | None,
    head_groups: frozenset[str],
    login_groups: frozenset[str],
    storage: Mapping[str, str] | None = None,
) -> Node:
    """Build a Node from list_cluster_nodes (and, when asked, describe_cluster_node) answers.

    HyperPod has no node-type tag: the instance group names that hold the Slurm controller and the login
    nodes are configuration, so the caller passes them. Its nodes are not EC2 instances of the account, so
    the cluster's storage defaults come from the cluster's own tags (``storage``, see storage_from_tags).
    """
    group = str(summary["InstanceGroupName"])
    details = details or {}
    placement = details.get("Placement") or {}
    private_ip = details.get("PrivatePrimaryIp") or None
    private_dns = details.get("PrivateDnsHostname") or None
    role = "head" if group in head_groups else "login" if group in login_groups else "compute"
    return Node(
        instance_id=str(summary["InstanceId"]),
        instance_type=ec2_type_name(str(summary.get("InstanceType") or details.get("InstanceType") or "")),
        region=region,
        cluster_name=cluster_name,
        cluster_kind="hyperpod",
        role=role,
        availability_zone=placement.get("AvailabilityZone") if isinstance(placement, Mapping) else None,
        private_ip=private_ip,  # type: ignore[arg-type]
        private_dns=private_dns,  # type: ignore[arg-type]
        queue=group,
        slurm_node_name=slurm_name_from_address(private_dns, private_ip),  # type: ignore[arg-type]
        cluster_id=cluster_id,
        storage=dict(storage) if storage else None,
    )


def with_cluster_storage(nodes: Iterable[Node], storage_by_cluster: Mapping[str, Mapping[str, str]]) -> None:
    """Give the nodes of each cluster that carry no storage tags of their own the storage defaults its
    cluster resource's tags hold (``storage_by_cluster``, by cluster name; AWS PCS's nodes: see the AWS
    layer). An instance's own tags win: they are what that node was launched with."""
    for node in nodes:
        found = storage_by_cluster.get(node.cluster_name)
        if node.storage is None and found:
            node.storage = dict(found)


def ssm_target(node: Node) -> str:
    """HyperPod's SSM target: `sagemaker-cluster:<cluster-id>_<instance-group>-<instance-id>`."""
    return f"sagemaker-cluster:{node.cluster_id}_{node.queue}-{node.instance_id}"


def ssm_proxy_args(target: str, region: str, profile: str | None) -> str:
    """ssh options that tunnel through SSM, so HyperPod nodes need no inbound port or bastion.

    Each value is shell-quoted (ssh runs ProxyCommand with the user's shell) with its % doubled (ssh expands
    %-tokens); the command is double-quoted once more for Ansible, which splits ssh_common_args with shlex.
    """
    target, region = target.replace("%", "%%"), region.replace("%", "%%")
    words = ["aws", "ssm", "start-session", "--target", target, "--document-name", "AWS-StartSSHSession"]
    words += ["--parameters", "portNumber=%p", "--region", region]
    if profile:
        words += ["--profile", profile.replace("%", "%%")]
    command = shlex.join(words).replace("\\", "\\\\").replace('"', '\\"')
    return f'-o ProxyCommand="{command}"'


# Node field behind each `hostnames` choice; looked up by name so that no mapping is built per host.
_HOSTNAME_FIELD = {
    "private-dns-name": "private_dns",
    "private-ip-address": "private_ip",
    "instance-id": "instance_id",
    "slurm-node-name": "slurm_node_name",
}


def choose_hostname(node: Node, preferences: Sequence[str]) -> str:
    """First available name in the user's order; the instance id always exists, so it closes the list."""
    for preference in preferences:
        field_name = _HOSTNAME_FIELD.get(preference)
        value = getattr(node, field_name) if field_name else None
        if value:
            return value
    return node.instance_id


@lru_cache(maxsize=4096)
def safe_group(name: str) -> str:
    """Ansible group names allow letters, digits and underscores only.

    Cached: the same few hundred cluster, role, type and zone names recur for every host of a fleet.
    """
    return _UNSAFE_GROUP_CHARS.sub("_", name)


def group_names(node: Node, prefix: str) -> list[tuple[str, str | None]]:
    """The groups one node joins, each with its parent group (or None for a top-level group).

    Kind, cluster, role, instance type, zone and region are top-level; the cluster's role and queue groups
    are children of the cluster group so that `cluster_x` reads as a tree in `ansible-inventory --graph`.
    """
    cluster = f"{prefix}cluster_{safe_group(node.cluster_name)}"
    names: list[tuple[str, str | None]] = [
        (f"{prefix}kind_{node.cluster_kind}", None),
        (cluster, None),
        (f"{cluster}_{safe_group(node.role)}", cluster),
        (f"{prefix}role_{safe_group(node.role)}", None),
        (f"{prefix}type_{safe_group(node.instance_type)}", None),
        (f"{prefix}region_{safe_group(node.region)}", None),
    ]
    if node.queue:
        names.append((f"{cluster}_queue_{safe_group(node.queue)}", cluster))
    if node.availability_zone:
        names.append((f"{prefix}az_{safe_group(node.availability_zone)}", None))
    return names


def host_variables(
    node: Node, facts: TypeFacts | None, ssm: bool, ssm_profile: str | None
) -> dict[str, object]:
    """The lean variable set of one host (about 16 names); absent facts are left out, not set to null."""
    hostvars: dict[str, object] = {
        "cluster_name": node.cluster_name,
        "cluster_kind": node.cluster_kind,
        "cluster_node_role": node.role,
        "ec2_instance_id": node.instance_id,
        "ec2_instance_type": node.instance_type,
        "ec2_region": node.region,
    }
    optional = {
        "cluster_queue": node.queue,
        "cluster_compute_resource": node.compute_resource,
        "cluster_slurm_node_name": node.slurm_node_name,
        "cluster_id": node.cluster_id,
        "ec2_availability_zone": node.availability_zone,
        "ec2_private_ip_address": node.private_ip,
        "ec2_private_dns_name": node.private_dns,
        "ec2_tags": node.tags,
        "cluster_storage": node.storage,
    }
    hostvars.update((key, value) for key, value in optional.items() if value is not None)
    if facts is not None:
        hostvars["ec2_gpu_count"] = facts.gpu_count
        hostvars["ec2_efa_interfaces"] = facts.efa_interfaces
        if facts.gpu_count:
            hostvars["ec2_gpu_model"] = facts.gpu_model
            hostvars["ec2_gpu_memory_mib"] = facts.gpu_memory_mib
    address = node.private_ip or node.private_dns
    if node.cluster_kind == "hyperpod" and ssm:
        target = ssm_target(node)
        hostvars["hyperpod_ssm_target"] = target
        hostvars["ansible_ssh_common_args"] = ssm_proxy_args(target, node.region, ssm_profile)
        address = address or target
    if address:
        hostvars["ansible_host"] = address
    return hostvars


# Which host variables are facts of which group: (group kind from group_names order, variable names).
_SHARED_BY = {
    "cluster": ("cluster_name", "cluster_kind", "cluster_id", "cluster_storage"),
    "cluster_role": ("cluster_node_role",),
    "type": (
        "ec2_instance_type",
        "ec2_gpu_count",
        "ec2_gpu_model",
        "ec2_gpu_memory_mib",
        "ec2_efa_interfaces",
    ),
    "region": ("ec2_region",),
    "queue": ("cluster_queue",),
    "az": ("ec2_availability_zone",),
}
_CONFLICT = object()
_ABSENT = object()
_UNSET = object()


def _merge_shared(values: dict[str, object], var: str, value: object) -> None:
    """Record one host's value of a shared fact; any disagreement (absence included) marks a conflict."""
    current = values.get(var, _UNSET)
    if current is _UNSET:
        values[var] = value
    elif current is not _CONFLICT and (
        current is not value and (type(current) is not type(value) or current != value)
    ):
        values[var] = _CONFLICT


def _is_value(value: object) -> bool:
    return value is not _CONFLICT and value is not _ABSENT and value is not _UNSET


def shared_groups(node: Node, prefix: str) -> dict[str, str]:
    """Group that carries each kind of shared fact for this node (the names group_names gives it)."""
    cluster = f"{prefix}cluster_{safe_group(node.cluster_name)}"
    owners = {
        "cluster": cluster,
        "cluster_role": f"{cluster}_{safe_group(node.role)}",
        "type": f"{prefix}type_{safe_group(node.instance_type)}",
        "region": f"{prefix}region_{safe_group(node.region)}",
    }
    if node.queue:
        owners["queue"] = f"{cluster}_queue_{safe_group(node.queue)}"
    if node.availability_zone:
        owners["az"] = f"{prefix}az_{safe_group(node.availability_zone)}"
    return owners


def build_plan(
    nodes: Iterable[Node],
    facts: Mapping[str, TypeFacts],
    hostnames: Sequence[str],
    prefix: str = "",
    ssm: bool = True,
    ssm_profile: str | None = None,
) -> Plan:
    """Whole inventory in two linear passes: no per-host templating, one dict insert per (host, group).

    A host name seen twice (two regions answering for the same instance, or two clusters with the same
    moto-style instance ids) keeps the first node and is reported, rather than silently merging variables.
    A shared fact whose value differs inside one group (say a ParallelCluster and a HyperPod cluster with
    the same name, hence one cluster group with two kinds) stays a host variable for that group's hosts.
    """
    plan = Plan()
    children: dict[str, set[str]] = {}
    # Hosts that share a cluster, role, queue, type, region and zone share every group and every group
    # that holds a shared fact; both are worked out once per such placement, not once per host.
    placements: dict[tuple[object, ...], tuple[list[tuple[str, str | None]], dict[str, str]]] = {}
    owners_of: dict[str, dict[str, str]] = {}
    for node in nodes:
        host = choose_hostname(node, hostnames)
        if host in plan.hostvars:
            plan.duplicates.append(host)
            continue
        hostvars = host_variables(node, facts.get(node.instance_type), ssm, ssm_profile)
        plan.hostvars[host] = hostvars
        key = _placement(node)
        placement = placements.get(key)
        if placement is None:
            placement = placements[key] = (group_names(node, prefix), shared_groups(node, prefix))
            for name, parent in placement[0]:
                if parent is not None:
                    children.setdefault(parent, set()).add(name)
        names, owners = placement
        for name, _parent in names:
            plan.groups.setdefault(name, []).append(host)
        owners_of[host] = owners
        for kind, group in owners.items():
            values = plan.groupvars.setdefault(group, {})
            for var in _SHARED_BY[kind]:
                _merge_shared(values, var, hostvars.get(var, _ABSENT))
    moved_by_owners: dict[int, frozenset[str]] = {}
    for host, hostvars in plan.hostvars.items():
        owners = owners_of[host]
        moved = moved_by_owners.get(id(owners))
        if moved is None:
            moved = moved_by_owners[id(owners)] = frozenset(
                var
                for kind, group in owners.items()
                for var in _SHARED_BY[kind]
                if _is_value(plan.groupvars[group].get(var, _UNSET))
            )
        plan.host_only[host] = {var: value for var, value in hostvars.items() if var not in moved}
    plan.groupvars = {
        group: {var: value for var, value in values.items() if _is_value(value)}
        for group, values in plan.groupvars.items()
    }
    plan.children = {parent: sorted(kids) for parent, kids in children.items()}
    return plan


def _placement(node: Node) -> tuple[object, ...]:
    """Everything group_names and shared_groups read from a node: equal placements, equal groups."""
    return (
        node.cluster_name,
        node.cluster_kind,
        node.role,
        node.instance_type,
        node.region,
        node.queue,
        node.availability_zone,
    )
