# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""What the five target services refuse, checked on the cluster spec before anything is rendered or created.

Why a table of our own: one spec renders to ParallelCluster, SageMaker HyperPod, AWS PCS, Amazon EKS and AWS
Batch. Each service refuses names, counts and values by its own rules, and used to say so only once a request
or a configuration reached it, naming its own field (`ClusterName`, `computeNodeGroupName`) rather than the
spec's key. Here every rule is one row: the spec key it reads, the target and field that impose it, where
the rule comes from (a ParallelCluster validator or constant at the release mk/pcluster-requirements.txt
pins, or a shape of botocore's model of the service API), and its values. A spec passes only what every
target takes, so one spec stays portable: the cluster name, for instance, meets the strictest of the five.

What only one target cannot do (HyperPod's `ml.` instance types and its lack of Spot, PCS's largest cluster
size, Batch's composite resource names) stays in that target's renderer, which also names the spec key. Rows
whose `checked_by` is `schema` are enforced by the spec's JSON Schema (cluster_spec.SCHEMA) and are listed
so that the unit tests can hold the schema to the service; rows checked by a renderer are listed for the
same reason. The tests derive their cases from the pinned ParallelCluster package (through a committed
snapshot, tests/unit/plugins/module_utils/fixtures/pcluster_limits.json) and from botocore's models, so a
new upstream rule shows up as a failing test, not as a refused request.

Two checks read botocore's data files at run time, offline: the region must be one of botocore's endpoint
partitions (endpoints.json; the rule is aws/names.region_problem, which the foundation applies too), and a
head or login node type outside the instance catalog (which holds the
accelerated types only) must be one EC2's model knows (its InstanceType enum). Without botocore both are
skipped; every other rule is plain data.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.aws import names
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.names import did_you_mean
from ansible_collections.trainstack.cluster.plugins.module_utils.catalog import instance_catalog

PCLUSTER = "ParallelCluster"
HYPERPOD = "SageMaker HyperPod"
PCS = "AWS PCS"
EKS = "Amazon EKS"
BATCH = "AWS Batch"
TARGETS = (PCLUSTER, HYPERPOD, PCS, EKS, BATCH)
# The AWS foundation every target's cluster playbook makes first: its VPC, bucket and IAM role names are made
# from the cluster name, so its rule (module_utils/aws/names.py, which the role's validate.yml asks through
# the foundation_name_problem filter) binds every target.
FOUNDATION = "the AWS foundation"
FOUNDATION_NAME = names.FOUNDATION_NAME

# Where checked: by this module on the spec, by the spec's JSON Schema, or by one target's renderer only.
SPEC, SCHEMA = "spec", "schema"


@dataclass(frozen=True)
class Rule:
    """One thing a target refuses in one spec key; `key` uses [] for every item of a list."""

    key: str
    target: str
    field: str
    source: str
    pattern: str | None = None
    min_len: int | None = None
    max_len: int | None = None
    minimum: int | None = None
    maximum: int | None = None
    enum: tuple[Any, ...] | None = None
    reserved: tuple[str, ...] = ()
    when: str | None = None
    checked_by: str = SPEC


# ---------------------------------------------------------------- the table

# ParallelCluster 3.16.1 (pcluster/constants.py and pcluster/validators/cluster_validators.py).
PCLUSTER_NAME_REGEX = r"^([a-zA-Z][a-zA-Z0-9-]{0,%d})$"
PCLUSTER_NAME_MAX_LENGTH = 60
PCLUSTER_NAME_MAX_LENGTH_SLURM_ACCOUNTING = 40
PCLUSTER_AMI_ID_REGEX = r"^ami-[0-9a-z]{8}$|^ami-[0-9a-z]{17}$"
PCLUSTER_QUEUE_NAME_REGEX = r"^[a-z][a-z0-9\-]*$"
PCLUSTER_QUEUE_NAME_MAX_LENGTH = 25
PCLUSTER_RESERVED_NAMES = ("default",)
MAX_NUMBER_OF_QUEUES = 50
MAX_COMPUTE_RESOURCES_PER_QUEUE = 50
MAX_NUMBER_OF_COMPUTE_RESOURCES_PER_CLUSTER = 50
MAX_NUMBER_OF_LOGIN_NODE_POOLS = 10
PCLUSTER_TAG_VALUE_REGEX = r"^([\w\+\-\=\.\_\:\@/]{0,256})$"
# Patterns of ParallelCluster's schema (pcluster/schemas/cluster_schema.py) on fields filled from the spec.
PCLUSTER_SUBNET_ID_REGEX = r"^subnet-[0-9a-z]{8}$|^subnet-[0-9a-z]{17}$"
PCLUSTER_MOUNT_DIR_REGEX = r"^\/?[^\/.\\][^\/\\]*(\/[^\/.\\][^\/]*)*$"
# SharedStorageMountDirValidator: directories a shared file system may not be mounted on.
PCLUSTER_RESERVED_MOUNT_DIRS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib64",
    "/media",
    "/mnt",
    "/opt",
    "/opt/parallelcluster",
    "/opt/parallelcluster/shared",
    "/opt/parallelcluster/shared_login_nodes",
    "/opt/slurm",
    "/opt/intel",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/srv",
    "/sys",
    "/tmp",
    "/usr",
    "/var",
)

# botocore's models (botocore/data/<service>/<version>/service-2.json) of the pinned botocore; the unit tests
# compare every value here with the installed model's.
HYPERPOD_NAME = r"[a-zA-Z0-9](-*[a-zA-Z0-9])*"
PCS_NAME = r"(?!pcs_)^[A-Za-z][A-Za-z0-9-]+"
PCS_CLUSTER_ID = r"(pcs_[a-zA-Z0-9]+|[A-Za-z][A-Za-z0-9-]{2,40})"
EKS_CLUSTER_NAME = r"^[0-9A-Za-z][A-Za-z0-9\-_]*"
HYPERPOD_MOUNT_PATH = r"/[a-zA-Z0-9._/-]+"
HYPERPOD_TAG = r"([\p{L}\p{Z}\p{N}_.:/=+\-@]*)"
HYPERPOD_MAX_INSTANCE_COUNT = 6758
HYPERPOD_MAX_INSTANCE_GROUPS = 100
# The names our renderers give the groups that are not queues (hyperpod_render, pcs_render).
CONTROLLER_GROUP, LOGIN_GROUP = "controller", "login"

# Every request our renderers send is tagged with the cluster's name and its stack (trainstack:cluster,
# trainstack:stack); each service bounds a tag value.
TAGGED = (
    (HYPERPOD, "CreateCluster.Tags[].Value", "sagemaker TagValue", {"pattern": HYPERPOD_TAG, "min_len": 0}),
    (PCS, "CreateCluster.tags", "pcs TagValue", {"min_len": 0}),
    (PCS, "CreateComputeNodeGroup.tags", "pcs TagValue", {"min_len": 0}),
    (PCS, "CreateQueue.tags", "pcs TagValue", {"min_len": 0}),
    (EKS, "CreateCluster.tags", "eks TagValue", {}),
    (EKS, "CreateNodegroup.tags", "eks TagValue", {}),
    (BATCH, "CreateComputeEnvironment.tags", "batch TagValue", {}),
    (BATCH, "CreateJobQueue.tags", "batch TagValue", {}),
    (BATCH, "RegisterJobDefinition.tags", "batch TagValue", {}),
)
TAG_VALUE_MAX = 256

RULES: tuple[Rule, ...] = (
    # ---- the cluster name
    Rule(
        "name",
        PCLUSTER,
        "cluster name",
        "ClusterNameValidator, PCLUSTER_NAME_REGEX",
        pattern=PCLUSTER_NAME_REGEX % (PCLUSTER_NAME_MAX_LENGTH - 1),
        max_len=PCLUSTER_NAME_MAX_LENGTH,
    ),
    Rule(
        "name",
        PCLUSTER,
        "cluster name with Slurm accounting",
        "ClusterNameValidator, PCLUSTER_NAME_MAX_LENGTH_SLURM_ACCOUNTING",
        max_len=PCLUSTER_NAME_MAX_LENGTH_SLURM_ACCOUNTING,
        when="slurm_accounting",
    ),
    Rule("name", PCS, "CreateCluster.clusterName", "pcs ClusterName", PCS_NAME, 3, 40),
    Rule("name", PCS, "CreateComputeNodeGroup.clusterIdentifier", "pcs ClusterIdentifier", PCS_CLUSTER_ID),
    Rule("name", PCS, "CreateQueue.clusterIdentifier", "pcs ClusterIdentifier", PCS_CLUSTER_ID),
    Rule("name", HYPERPOD, "CreateCluster.ClusterName", "sagemaker ClusterName", HYPERPOD_NAME, 1, 63),
    Rule("name", EKS, "CreateCluster.name", "eks ClusterName", EKS_CLUSTER_NAME, 1, 100),
    Rule("name", FOUNDATION, "aws_foundation_cluster_name", "aws/names", FOUNDATION_NAME, 2, 32),
    # ---- queue names: ParallelCluster's queue, PCS's node group and queue, HyperPod's instance group
    Rule(
        "queues[].name",
        PCLUSTER,
        "SlurmQueues[].Name",
        "NameValidator",
        pattern=PCLUSTER_QUEUE_NAME_REGEX,
        max_len=PCLUSTER_QUEUE_NAME_MAX_LENGTH,
        reserved=PCLUSTER_RESERVED_NAMES,
    ),
    Rule(
        "queues[].name",
        PCS,
        "CreateComputeNodeGroup.computeNodeGroupName",
        "pcs ComputeNodeGroupName",
        PCS_NAME,
        3,
        25,
    ),
    Rule("queues[].name", PCS, "CreateQueue.queueName", "pcs QueueName", PCS_NAME, 3, 25),
    Rule(
        "queues[].name",
        HYPERPOD,
        "CreateCluster.InstanceGroups[].InstanceGroupName",
        "sagemaker ClusterInstanceGroupName",
        HYPERPOD_NAME,
        1,
        63,
        reserved=(CONTROLLER_GROUP,),
    ),
    Rule(
        "queues[].name",
        HYPERPOD,
        "CreateCluster.InstanceGroups[].SlurmConfig.PartitionNames[]",
        "sagemaker ClusterPartitionName",
        HYPERPOD_NAME,
        0,
        1024,
    ),
    Rule("queues[].name", EKS, "CreateNodegroup.labels", "eks labelValue", min_len=1, max_len=63),
    Rule(
        "queues[].name",
        PCS,
        "node group name of the login nodes",
        "pcs_render.LOGIN_GROUP",
        reserved=(LOGIN_GROUP,),
        when="login_nodes",
    ),
    Rule(
        "queues[].name",
        HYPERPOD,
        "instance group name of the login nodes",
        "hyperpod_render.LOGIN_GROUP",
        reserved=(LOGIN_GROUP,),
        when="login_nodes",
    ),
    # ---- counts
    Rule(
        "queues[].max_count",
        HYPERPOD,
        "CreateCluster.InstanceGroups[].InstanceCount",
        "sagemaker ClusterInstanceCount",
        minimum=0,
        maximum=HYPERPOD_MAX_INSTANCE_COUNT,
    ),
    Rule(
        "login_nodes.count",
        HYPERPOD,
        "CreateCluster.InstanceGroups[].InstanceCount",
        "sagemaker ClusterInstanceCount",
        minimum=0,
        maximum=HYPERPOD_MAX_INSTANCE_COUNT,
    ),
    Rule(
        "queues[].max_count",
        EKS,
        "CreateNodegroup.scalingConfig.maxSize",
        "eks Capacity",
        minimum=1,
        checked_by=SCHEMA,
    ),
    Rule(
        "queues[].min_count",
        EKS,
        "CreateNodegroup.scalingConfig.minSize",
        "eks ZeroCapacity",
        minimum=0,
        checked_by=SCHEMA,
    ),
    Rule(
        "queues[].min_count",
        EKS,
        "CreateNodegroup.scalingConfig.desiredSize",
        "eks ZeroCapacity",
        minimum=0,
        checked_by=SCHEMA,
    ),
    Rule(
        "queues[].min_count",
        PCS,
        "CreateComputeNodeGroup.scalingConfiguration.minInstanceCount",
        "pcs ScalingConfigurationRequestMinInstanceCountInteger",
        minimum=0,
        checked_by=SCHEMA,
    ),
    Rule(
        "queues[].max_count",
        PCS,
        "CreateComputeNodeGroup.scalingConfiguration.maxInstanceCount",
        "pcs ScalingConfigurationRequestMaxInstanceCountInteger",
        minimum=0,
        checked_by=SCHEMA,
    ),
    Rule(
        "login_nodes.count",
        PCS,
        "CreateComputeNodeGroup.scalingConfiguration.minInstanceCount",
        "pcs ScalingConfigurationRequestMinInstanceCountInteger",
        minimum=0,
        checked_by=SCHEMA,
    ),
    Rule(
        "login_nodes.count",
        PCS,
        "CreateComputeNodeGroup.scalingConfiguration.maxInstanceCount",
        "pcs ScalingConfigurationRequestMaxInstanceCountInteger",
        minimum=0,
        checked_by=SCHEMA,
    ),
    # ---- image, storage, HyperPod settings
    Rule(
        "network.public_subnet_id",
        PCLUSTER,
        "HeadNode.Networking.SubnetId",
        "ClusterSchema SubnetId",
        pattern=PCLUSTER_SUBNET_ID_REGEX,
    ),
    Rule(
        "network.private_subnet_id",
        PCLUSTER,
        "SlurmQueues[].Networking.SubnetIds[]",
        "ClusterSchema SubnetId",
        pattern=PCLUSTER_SUBNET_ID_REGEX,
    ),
    Rule(
        "network.private_subnet_id",
        PCS,
        "CreateCluster.networking.subnetIds[]",
        "pcs SubnetId",
        pattern=r"subnet-\w{8,17}",
    ),
    Rule(
        "network.private_subnet_id",
        HYPERPOD,
        "CreateCluster.VpcConfig.Subnets[]",
        "sagemaker SubnetId",
        pattern=r"[-0-9a-zA-Z]+",
        min_len=0,
        max_len=32,
    ),
    Rule(
        "image.stack", PCLUSTER, "Tags[].Value", "PCLUSTER_TAG_VALUE_REGEX", pattern=PCLUSTER_TAG_VALUE_REGEX
    ),
    Rule(
        "shared_storage.fsx_lustre.mount_dir",
        PCLUSTER,
        "SharedStorage[].MountDir",
        "ClusterSchema MountDir",
        pattern=PCLUSTER_MOUNT_DIR_REGEX,
    ),
    Rule("image.ami_id", PCLUSTER, "Image.CustomAmi", "PCLUSTER_AMI_ID_REGEX", pattern=PCLUSTER_AMI_ID_REGEX),
    Rule("image.ami_id", PCS, "CreateComputeNodeGroup.amiId", "pcs AmiId", pattern=r"ami-[a-z0-9]+"),
    Rule("image.stack", EKS, "CreateNodegroup.labels", "eks labelValue", min_len=1, max_len=63),
    Rule(
        "shared_storage.fsx_lustre.mount_dir",
        PCLUSTER,
        "SharedStorage[].MountDir",
        "SharedStorageMountDirValidator",
        reserved=PCLUSTER_RESERVED_MOUNT_DIRS,
    ),
    Rule(
        "shared_storage.fsx_lustre.mount_dir",
        HYPERPOD,
        "CreateCluster.InstanceGroups[].InstanceStorageConfigs[].FsxLustreConfig.MountPath",
        "sagemaker ClusterFsxMountPath",
        HYPERPOD_MOUNT_PATH,
        1,
        1024,
    ),
    Rule(
        "head_node.ssh_key_name",
        PCS,
        "CreateComputeNodeGroup.sshKeyName",
        "pcs KeyPairName",
        min_len=1,
        max_len=255,
        checked_by=SCHEMA,
    ),
    Rule(
        "hyperpod.threads_per_core",
        HYPERPOD,
        "CreateCluster.InstanceGroups[].ThreadsPerCore",
        "sagemaker ClusterThreadsPerCore",
        minimum=1,
        maximum=2,
        checked_by=SCHEMA,
    ),
    Rule(
        "hyperpod.root_volume_gib",
        HYPERPOD,
        "CreateCluster.InstanceGroups[].InstanceStorageConfigs[].EbsVolumeConfig.VolumeSizeInGB",
        "sagemaker ClusterEbsVolumeSizeInGB",
        minimum=1,
        maximum=16384,
        checked_by=SCHEMA,
    ),
    Rule(
        "hyperpod.volume_gib",
        HYPERPOD,
        "CreateCluster.InstanceGroups[].InstanceStorageConfigs[].EbsVolumeConfig.VolumeSizeInGB",
        "sagemaker ClusterEbsVolumeSizeInGB",
        minimum=1,
        maximum=16384,
        checked_by=SCHEMA,
    ),
    # ---- target-only rules, kept by the renderer of that target (listed for the tests)
    Rule(
        "queues[].instance_type",
        HYPERPOD,
        "CreateCluster.InstanceGroups[].InstanceType",
        "sagemaker ClusterInstanceType",
        checked_by="hyperpod_render",
    ),
    Rule(
        "head_node.instance_type",
        HYPERPOD,
        "CreateCluster.InstanceGroups[].InstanceType",
        "sagemaker ClusterInstanceType",
        checked_by="hyperpod_render",
    ),
    Rule(
        "login_nodes.instance_type",
        HYPERPOD,
        "CreateCluster.InstanceGroups[].InstanceType",
        "sagemaker ClusterInstanceType",
        checked_by="hyperpod_render",
    ),
    Rule(
        "queues[].capacity_type",
        PCS,
        "CreateComputeNodeGroup.purchaseOption",
        "pcs PurchaseOption",
        checked_by="pcs_render",
    ),
    Rule(
        "queues[].capacity_type",
        EKS,
        "CreateNodegroup.capacityType",
        "eks CapacityTypes",
        checked_by="eks_render",
    ),
)

RULES += tuple(
    Rule(key, target, field, source, max_len=TAG_VALUE_MAX, **extra)
    for key in ("name", "image.stack")
    for target, field, source, extra in TAGGED
)


@dataclass(frozen=True)
class CountLimit:
    """A service quota on how many of something one spec makes, counted from the spec."""

    key: str
    target: str
    what: str
    source: str
    limit: int


COUNT_LIMITS: tuple[CountLimit, ...] = (
    CountLimit(
        "queues", PCLUSTER, "Slurm queues", "MaxCountValidator, MAX_NUMBER_OF_QUEUES", MAX_NUMBER_OF_QUEUES
    ),
    # One compute resource per queue (pcluster_render), so the cluster has as many as it has queues.
    CountLimit(
        "queues",
        PCLUSTER,
        "compute resources in the cluster",
        "MaxCountValidator, MAX_NUMBER_OF_COMPUTE_RESOURCES_PER_CLUSTER",
        MAX_NUMBER_OF_COMPUTE_RESOURCES_PER_CLUSTER,
    ),
    CountLimit(
        "queues",
        HYPERPOD,
        "instance groups (a controller, the login nodes, one per queue)",
        "sagemaker ClusterInstanceGroupSpecifications",
        HYPERPOD_MAX_INSTANCE_GROUPS,
    ),
)


def count_of(limit: CountLimit, spec: Mapping[str, Any]) -> int:
    """How many of `limit.what` the spec makes (HyperPod adds its controller and login groups)."""
    count = len(spec["queues"])
    if limit.target == HYPERPOD:
        count += 1 + (1 if spec.get("login_nodes") else 0)
    return count


# ---------------------------------------------------------------- checking


def values_at(spec: Mapping[str, Any], key: str) -> Iterator[tuple[str, Any]]:
    """(dotted key with indices, value) of every value at `key`; [] walks every item of a list."""
    items: list[tuple[str, Any]] = [("", spec)]
    for part in key.split("."):
        each = part.endswith("[]")
        name = part[:-2] if each else part
        found = []
        for where, value in items:
            if not isinstance(value, Mapping) or value.get(name) is None:
                continue
            path = f"{where}.{name}" if where else name
            if each and isinstance(value[name], list):
                found += [(f"{path}[{index}]", item) for index, item in enumerate(value[name])]
            elif not each:
                found.append((path, value[name]))
        items = found
    yield from items


def _matches(pattern: str, value: str) -> bool:
    """The whole value must match (the services anchor their patterns); a Java class Python cannot read
    (\\p{L}) is left to the service."""
    try:
        return re.fullmatch(pattern, value) is not None
    except re.error:
        return True


def _rule_text(rule: Rule) -> str:
    parts = []
    if rule.min_len is not None and rule.max_len is not None:
        parts.append(f"{rule.min_len} to {rule.max_len} characters")
    elif rule.max_len is not None:
        parts.append(f"at most {rule.max_len} characters")
    if rule.pattern:
        parts.append(f"matching {rule.pattern}")
    return ", ".join(parts)


def _origin(rule: Rule) -> str:
    return f"{rule.target}: {rule.field}; {rule.source}"


def rule_problems(rule: Rule, value: Any) -> list[str]:
    """What is wrong with `value` under `rule`, one text per way (the caller adds the key and the origin)."""
    found = []
    if isinstance(value, str):
        too_short = rule.min_len is not None and len(value) < rule.min_len
        too_long = rule.max_len is not None and len(value) > rule.max_len
        if too_short or too_long or (rule.pattern and not _matches(rule.pattern, value)):
            found.append(f"{value!r} must be {_rule_text(rule)}")
        # A directory is reserved with or without its trailing '/'.
        if value in rule.reserved or (len(value) > 1 and value.rstrip("/") in rule.reserved):
            found.append(f"{value!r} is reserved by {rule.target}")
    elif isinstance(value, int) and not isinstance(value, bool):
        if rule.maximum is not None and value > rule.maximum:
            found.append(f"{value} is more than {rule.maximum}, the most {rule.target} takes")
        if rule.minimum is not None and value < rule.minimum:
            found.append(f"{value} is less than {rule.minimum}, the least {rule.target} takes")
    return found


def table_problems(spec: Mapping[str, Any]) -> list[str]:
    """Every row of RULES checked here, on the normalised spec; a rule two fields of one target share (PCS's
    node group and queue names) is said once."""
    found: list[str] = []
    seen: set[tuple[str, str, str]] = set()
    for rule in RULES:
        if rule.checked_by != SPEC or (rule.when and not spec.get(rule.when)):
            continue
        for where, value in values_at(spec, rule.key):
            for text in rule_problems(rule, value):
                if (where, text, rule.target) not in seen:
                    seen.add((where, text, rule.target))
                    found.append(f"{where}: {text} ({_origin(rule)})")
    return found


def count_problems(spec: Mapping[str, Any]) -> list[str]:
    """Service quotas on how many queues (and so compute resources and instance groups) one cluster has."""
    found = []
    for limit in COUNT_LIMITS:
        count = count_of(limit, spec)
        if count > limit.limit:
            found.append(
                f"{limit.key}: {count} {limit.what}; {limit.target} takes at most {limit.limit} "
                f"({limit.source})"
            )
    return found


# ---------------------------------------------------------------- region and instance types (botocore data)


@functools.cache
def ec2_instance_types() -> frozenset[str]:
    """Every instance type EC2's model names (its InstanceType enum); empty without botocore."""
    try:
        from botocore.loaders import create_loader
    except ImportError:  # pragma: no cover
        return frozenset()
    model = create_loader().load_service_model("ec2", "service-2")
    return frozenset(model["shapes"]["InstanceType"]["enum"])


def region_problems(spec: Mapping[str, Any]) -> list[str]:
    """The region, by the rule the foundation applies too (module_utils/aws/names.py)."""
    problem = names.region_problem(spec["region"], "region")
    return [problem] if problem else []


def node_type_problems(spec: Mapping[str, Any], catalog: instance_catalog.Catalog) -> list[str]:
    """Head and login node types: in the instance catalog, or at least a type EC2 knows (the catalog holds the
    accelerated types a queue runs; a head node is usually a general-purpose one)."""
    found = []
    for key in ("head_node", "login_nodes"):
        section = spec.get(key)
        if not section:
            continue
        name = section["instance_type"]
        if catalog.find(name) is not None:
            continue
        ec2 = ec2_instance_types()
        if not ec2 or name in ec2:
            continue
        known = ec2 | {n for n in catalog.names() if "." in n}
        found.append(
            f"{key}.instance_type: {name!r} is neither in the instance catalog (stacks/instance_types.yml) "
            f"nor an EC2 instance type (botocore's EC2 model){did_you_mean(name, known)}"
        )
    return found


def problems(spec: Mapping[str, Any], catalog: instance_catalog.Catalog) -> list[str]:
    """Everything a target service would refuse in the normalised `spec`, one '<key>: <rule>' line each."""
    return (
        region_problems(spec)
        + node_type_problems(spec, catalog)
        + table_problems(spec)
        + count_problems(spec)
    )
