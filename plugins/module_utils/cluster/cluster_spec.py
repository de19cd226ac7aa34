# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The cluster spec: one YAML document per AWS training cluster, its schema, its rules and its defaults.

Why a spec of our own instead of a ParallelCluster file: users used to write that file by hand, paste an AMI
id and write shell post-install actions; the key names are ParallelCluster's, the choices that matter (which
image, EFA or not, which FSx size) are ours to check against the instance catalog and the training stack. The
spec says what the cluster is; module_utils/cluster/pcluster_render.py says how ParallelCluster 3 spells it.

The schema is JSON Schema applied by module_utils/stack/stack_schema.py's validator (the same one the stack
files use, published as stacks/schema/cluster.schema.json), so a misspelt or unknown key, a wrong type or a
null section is refused with its dotted path. The rules after it need the catalog or the stack, which JSON
Schema cannot see: each names the key and the rule. Nothing is read from AWS here: a spec is checked offline.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.catalog import instance_catalog
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import (
    resilience,
    storage,
    target_limits,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.files import strict_yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.stack import stack_schema
from ansible_collections.trainstack.cluster.plugins.module_utils.stack.stack_matrix import StackError
from ansible_collections.trainstack.cluster.plugins.module_utils.stack.stack_resolver import (
    load_stack,
    stacks_dir,
)

SCHEMA_ID = "https://trainstack.invalid/schema/cluster.schema.json"

# What the image factory builds as an AMI, in the stack's OS ids (debian-12 is the lab's image only).
IMAGE_OS = ("ubuntu-22.04", "ubuntu-24.04", "amzn-2023")
# The tag the image factory gives every AMI naming its flavour (packer/builds.amazon.pkr.hcl).
FLAVOUR_TAG = "trainstack:flavour"
DEPLOYMENT_TYPES = ("SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2")
CAPACITY_TYPES = ("on_demand", "spot", "capacity_block")

# FSx for Lustre storage capacity on SSD (the FSx CreateFileSystem API reference): SCRATCH_1 takes 1200, 2400,
# then steps of 3600 GiB; SCRATCH_2, PERSISTENT_1 and PERSISTENT_2 take 1200, 2400, then steps of 2400 GiB.
FSX_SMALL_SIZES = (1200, 2400)
FSX_STEP_GIB = {"SCRATCH_1": 3600, "SCRATCH_2": 2400, "PERSISTENT_1": 2400, "PERSISTENT_2": 2400}
# PerUnitStorageThroughput (MB/s/TiB) on SSD; scratch file systems take none. The first is the default.
FSX_THROUGHPUT = {"PERSISTENT_1": (50, 100, 200), "PERSISTENT_2": (125, 250, 500, 1000)}

_INSTANCE_TYPE = {"type": "string", "pattern": r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$"}
_BOOL = {"type": "boolean"}
_COUNT = {"type": "integer", "minimum": 0}
_SUBNET = {"type": "string", "pattern": r"^subnet-[0-9a-f]{8,17}$"}
_RESERVATION = {"type": "string", "pattern": r"^cr-[0-9a-f]{8,17}$"}

_QUEUE = {
    "type": "object",
    "description": "One Slurm queue (partition) of one instance type.",
    "additionalProperties": False,
    "required": ["name", "instance_type", "max_count"],
    "properties": {
        "name": {"type": "string", "pattern": r"^[a-z][a-z0-9-]*$", "maxLength": 25},
        "instance_type": _INSTANCE_TYPE,
        "min_count": _COUNT,
        "max_count": {"type": "integer", "minimum": 1},
        "efa": {**_BOOL, "description": "default: true exactly when the catalog gives the type EFA."},
        "placement_group": {**_BOOL, "description": "default: the value of efa."},
        "capacity_type": {"type": "string", "enum": list(CAPACITY_TYPES)},
        "capacity_reservation_id": {
            **_RESERVATION,
            "description": "An On-Demand Capacity Reservation, or the Capacity Block (capacity_block).",
        },
    },
}

_FSX = {
    "type": "object",
    "additionalProperties": False,
    "required": ["storage_capacity_gib"],
    "properties": {
        "mount_dir": {"type": "string", "pattern": r"^/[A-Za-z0-9._/-]*$"},
        "deployment_type": {"type": "string", "enum": list(DEPLOYMENT_TYPES)},
        "storage_capacity_gib": {"type": "integer", "minimum": 1200},
        "per_unit_storage_throughput": {"type": "integer", "minimum": 1},
        "data_repository_path": {
            "type": "string",
            "pattern": r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/\S*)?$",
        },
        "data_repository_file_system_path": storage.FILE_SYSTEM_PATH_SCHEMA,
    },
}

# SageMaker HyperPod only (module_utils/cluster/hyperpod_render.py); the ParallelCluster and PCS renderers
# ignore it. Sizes are those of the SageMaker model's ClusterEbsVolumeConfig.VolumeSizeInGB.
_HYPERPOD = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "threads_per_core": {"type": "integer", "enum": [1, 2], "description": "default: 1 (no SMT)."},
        "root_volume_gib": {"type": "integer", "minimum": 1, "maximum": 16384},
        "volume_gib": {
            "type": "integer",
            "minimum": 1,
            "maximum": 16384,
            "description": "A second EBS volume on every node (HyperPod mounts it at /opt/sagemaker).",
        },
    },
}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": SCHEMA_ID,
    "title": "trainstack AWS cluster spec",
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "region", "availability_zone", "network", "head_node", "queues", "image"],
    "properties": {
        "name": {"type": "string", "pattern": r"^[a-zA-Z][a-zA-Z0-9-]*$", "maxLength": 60},
        "region": {"type": "string", "pattern": r"^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-[0-9]+$"},
        "availability_zone": {
            "type": "string",
            "pattern": r"^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-[0-9]+[a-z]$",
        },
        "network": {
            "type": "object",
            "additionalProperties": False,
            "required": ["vpc"],
            "properties": {
                "vpc": {"type": "string", "enum": ["new", "existing"]},
                "cidr": {"type": "string", "pattern": r"^[0-9]{1,3}(\.[0-9]{1,3}){3}/(1[6-9]|2[0-8])$"},
                "public_subnet_id": _SUBNET,
                "private_subnet_id": _SUBNET,
            },
            "allOf": [
                {
                    "if": {"properties": {"vpc": {"const": "existing"}}, "required": ["vpc"]},
                    "then": {"required": ["public_subnet_id", "private_subnet_id"]},
                }
            ],
        },
        "head_node": {
            "type": "object",
            "additionalProperties": False,
            "required": ["instance_type"],
            "properties": {
                "instance_type": _INSTANCE_TYPE,
                "ssh_key_name": {"type": "string", "minLength": 1, "maxLength": 255},
            },
        },
        "login_nodes": {
            "type": "object",
            "additionalProperties": False,
            "required": ["instance_type"],
            "properties": {"instance_type": _INSTANCE_TYPE, "count": {"type": "integer", "minimum": 1}},
        },
        "queues": {"type": "array", "items": {"$ref": "#/$defs/queue"}, "minItems": 1},
        "shared_storage": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "fsx_lustre": {"$ref": "#/$defs/fsx_lustre"},
                "efs_home": _BOOL,
                "data_dir": storage.DATA_DIR_SCHEMA,
                "checkpoint_dir": storage.CHECKPOINT_DIR_SCHEMA,
            },
        },
        "image": {
            "type": "object",
            "additionalProperties": False,
            "required": ["os", "stack"],
            "properties": {
                "ami_id": {"type": "string", "pattern": r"^ami-[0-9a-f]{8,17}$"},
                "tags": {
                    "type": "object",
                    "minProperties": 1,
                    "propertyNames": {"pattern": r"^[A-Za-z0-9 +\-=._:/@]{1,128}$"},
                    "additionalProperties": {"type": "string"},
                },
                "os": {"type": "string", "enum": list(IMAGE_OS)},
                "stack": {"type": "string", "pattern": r"^[a-z][a-z0-9.-]*$"},
            },
        },
        "slurm_accounting": _BOOL,
        "monitoring": _BOOL,
        "hyperpod": _HYPERPOD,
        "resilience": resilience.SCHEMA,
    },
    "$defs": {"queue": _QUEUE, "fsx_lustre": _FSX},
}


class ClusterSpecError(ValueError):
    """A spec breaks the schema or a rule; `problems` holds one '<file>: dotted.key: rule' line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


# ---------------------------------------------------------------- rules beyond the schema


def _fsx_problems(fsx: Mapping[str, Any]) -> list[str]:
    """Storage size and throughput must be ones FSx accepts for the deployment type (SSD storage)."""
    found = []
    where = "shared_storage.fsx_lustre"
    kind, size = fsx["deployment_type"], fsx["storage_capacity_gib"]
    step = FSX_STEP_GIB[kind]
    if size not in FSX_SMALL_SIZES and size % step != 0:
        found.append(
            f"{where}.storage_capacity_gib: {size} GiB is not a size {kind} accepts "
            f"(1200, 2400, or a multiple of {step})"
        )
    allowed = FSX_THROUGHPUT.get(kind, ())
    throughput = fsx.get("per_unit_storage_throughput")
    if throughput is not None and not allowed:
        found.append(
            f"{where}.per_unit_storage_throughput: {kind} takes no per-unit throughput (persistent only)"
        )
    elif throughput is not None and throughput not in allowed:
        found.append(
            f"{where}.per_unit_storage_throughput: {throughput} MB/s/TiB is not one {kind} accepts "
            f"({', '.join(map(str, allowed))})"
        )
    return found


def _capacity_problems(where: str, queue: Mapping[str, Any]) -> list[str]:
    """Spot runs on no reservation; a Capacity Block is a reservation of a fixed number of instances."""
    kind, reservation = queue["capacity_type"], queue.get("capacity_reservation_id")
    if kind == "spot" and reservation:
        return [f"{where}.capacity_reservation_id: a spot queue cannot use a capacity reservation"]
    if kind == "capacity_block" and not reservation:
        return [f"{where}.capacity_reservation_id: is required when capacity_type is capacity_block"]
    if kind == "capacity_block" and queue["min_count"] != queue["max_count"]:
        return [
            f"{where}.min_count: a Capacity Block queue runs its reserved instances as static nodes: "
            f"min_count ({queue['min_count']}) must equal max_count ({queue['max_count']})"
        ]
    return []


def _queue_problems(
    index: int, queue: dict[str, Any], catalog: instance_catalog.Catalog, stack: Mapping[str, Any] | None
) -> list[str]:
    """Catalog, EFA, stack scope and counts of one queue; fills its catalog-derived defaults on the way."""
    where = f"queues[{index}]"
    found: list[str] = []
    try:
        itype = catalog.get(queue["instance_type"])
    except instance_catalog.CatalogError:
        return [
            f"{where}.instance_type: {queue['instance_type']!r} is not in the instance catalog "
            f"(stacks/instance_types.yml); known: {', '.join(n for n in catalog.names() if '.' in n)}"
        ]
    queue.setdefault("efa", itype.efa_interfaces > 0)
    queue.setdefault("placement_group", queue["efa"])
    if queue["efa"] and itype.efa_interfaces == 0:
        found.append(
            f"{where}.efa: {itype.name} has no EFA interface in the instance catalog; set efa: false"
        )
    if queue["min_count"] > queue["max_count"]:
        found.append(f"{where}.min_count: {queue['min_count']} is more than max_count ({queue['max_count']})")
    found += _capacity_problems(where, queue)
    if stack is not None:
        found += _stack_problems(where, itype, stack)
    return found


def _stack_problems(where: str, itype: instance_catalog.InstanceType, stack: Mapping[str, Any]) -> list[str]:
    """The image's stack must have been built for this instance family and its architecture."""
    scope = stack["scope"]
    if itype.family not in scope["instance_families"]:
        return [
            f"{where}.instance_type: stack {stack['id']} (image.stack) does not support the {itype.family} "
            f"family of {itype.name}; it supports {', '.join(scope['instance_families'])}"
        ]
    if itype.arch not in scope["arch"]:
        return [f"{where}.instance_type: stack {stack['id']} (image.stack) is not built for {itype.arch}"]
    return []


def image_flavour_problems(spec: Mapping[str, Any], flavour: str, why: str) -> list[str]:
    """A spec that finds its AMI by a flavour tag naming another flavour than the orchestrator's nodes need.

    Why: the tag look-up would find an AMI that boots but lacks the orchestrator's agent; caught before any
    call instead of as nodes that never join."""
    named = (spec.get("image", {}).get("tags") or {}).get(FLAVOUR_TAG)
    if named is None or named == flavour:
        return []
    return [f"image.tags: {FLAVOUR_TAG} is {named!r}; these nodes boot the {flavour} image ({why})"]


def _image_problems(image: Mapping[str, Any], directory: Path) -> tuple[list[str], dict[str, Any] | None]:
    """One way to find the AMI, and a stack that exists and covers the image's OS; returns the stack too."""
    found = []
    if ("ami_id" in image) == ("tags" in image):
        found.append(
            "image: give exactly one of ami_id (the AMI the image factory built) or tags (to find it)"
        )
    try:
        stack = load_stack(directory, image["stack"])
    except StackError as exc:
        return [*found, f"image.stack: {exc}"], None
    if image["os"] not in stack["scope"]["os"] or image["os"] in stack["scope"].get("lab_os", []):
        found.append(f"image.os: stack {stack['id']} builds no AMI for {image['os']}")
    return found, stack


def _network_problems(network: Mapping[str, Any]) -> list[str]:
    if network["vpc"] == "new":
        given = [key for key in ("public_subnet_id", "private_subnet_id") if key in network]
        return [f"network.{key}: a new VPC (vpc: new) makes its own subnets; remove it" for key in given]
    if "cidr" in network:
        return ["network.cidr: an existing VPC (vpc: existing) keeps its own address range; remove it"]
    return []


def _cluster_problems(spec: Mapping[str, Any]) -> list[str]:
    """Rules across sections: the zone is in the region, queue names are unique, one image, one arch."""
    found = []
    if not spec["availability_zone"].startswith(spec["region"]):
        found.append(
            f"availability_zone: {spec['availability_zone']} is not a zone of region {spec['region']}"
        )
    names = [queue["name"] for queue in spec["queues"]]
    for index, name in enumerate(names):
        if name in names[:index]:
            found.append(f"queues[{index}].name: {name!r} is already the name of queues[{names.index(name)}]")
    return found


def _arch_problems(spec: Mapping[str, Any], catalog: instance_catalog.Catalog) -> list[str]:
    """One AMI serves the whole cluster, so every queue must share one CPU architecture."""
    arches = {}
    for index, queue in enumerate(spec["queues"]):
        itype = catalog.find(queue["instance_type"])
        if itype is not None:
            arches.setdefault(itype.arch, index)
    if len(arches) < 2:
        return []
    first, second = sorted(arches.items(), key=lambda item: item[1])[:2]
    return [
        f"queues[{second[1]}].instance_type: is {second[0]} but queues[{first[1]}] is {first[0]}; "
        "one image serves one architecture"
    ]


# ---------------------------------------------------------------- defaults and the entry points


def _with_defaults(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults every reader can rely on; catalog-derived ones (efa, placement_group) come with the rules."""
    out = copy.deepcopy(dict(spec))
    out.setdefault("slurm_accounting", False)
    out.setdefault("monitoring", True)
    out["resilience"] = resilience.with_defaults(out.get("resilience"))
    if out["network"]["vpc"] == "new":
        out["network"].setdefault("cidr", "10.0.0.0/16")
    if "login_nodes" in out:
        out["login_nodes"].setdefault("count", 1)
    for queue in out["queues"]:
        queue.setdefault("min_count", 0)
        queue.setdefault("capacity_type", "on_demand")
    shared = out.setdefault("shared_storage", {})
    shared.setdefault("efs_home", False)
    fsx = shared.get("fsx_lustre")
    if fsx is not None:
        fsx.setdefault("mount_dir", "/fsx")
        fsx.setdefault("deployment_type", "PERSISTENT_2")
        allowed = FSX_THROUGHPUT.get(fsx["deployment_type"])
        if allowed:
            fsx.setdefault("per_unit_storage_throughput", allowed[0])
    return out


def normalise(
    spec: Any,
    source: str = "cluster spec",
    *,
    catalog: instance_catalog.Catalog | None = None,
    stacks: str | Path | None = None,
) -> dict[str, Any]:
    """The spec with every default filled, or ClusterSpecError listing each problem as '<source>: key: rule'.

    The schema runs first: the rules below read keys it guarantees, so a malformed spec never reaches them.
    """
    shape = stack_schema.problems(spec, SCHEMA)
    if shape:
        raise ClusterSpecError([f"{source}: {line}" for line in shape])
    catalog = catalog or instance_catalog.default()
    out = _with_defaults(spec)
    found = _network_problems(out["network"]) + _cluster_problems(out)
    found += resilience.problems(spec.get("resilience"))
    image_found, stack = _image_problems(out["image"], stacks_dir(stacks))
    found += image_found
    for index, queue in enumerate(out["queues"]):
        found += _queue_problems(index, queue, catalog, stack)
    found += _arch_problems(out, catalog)
    fsx = out["shared_storage"].get("fsx_lustre")
    if fsx is not None:
        found += _fsx_problems(fsx)
    found += storage.problems(out)  # the launch's data and checkpoint defaults lie under a declared mount
    found += target_limits.problems(out, catalog)  # what the target services refuse (names, counts, ...)
    if found:
        raise ClusterSpecError([f"{source}: {line}" for line in found])
    return out


def load_file(path: str | Path, **kwargs: Any) -> dict[str, Any]:
    """Read one spec file (one YAML document) and normalise it; every message names the file."""
    import yaml

    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ClusterSpecError([f"{source}: cannot read the cluster spec ({exc.strerror})"]) from exc
    try:
        documents = strict_yaml.loads_all(text, source)
    except yaml.YAMLError as exc:
        raise ClusterSpecError([f"{source}: not YAML: {exc}"]) from exc
    if len(documents) != 1:
        raise ClusterSpecError(
            [f"{source}: must hold exactly one YAML document (one cluster), not {len(documents)}"]
        )
    return normalise(documents[0], source, **kwargs)
