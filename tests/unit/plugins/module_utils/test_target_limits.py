"""What the target services refuse, held to the services' own rules (module_utils/cluster/target_limits.py).

The cases come from the pinned sources, not from our table: ParallelCluster's through the committed
snapshot fixtures/pcluster_limits.json (scripts/pcluster_limits.py writes it in the ParallelCluster
virtualenv; the slow test tests/integration/cluster/test_pcluster_limits.py says when it is stale),
botocore's from its installed models. A new upstream rule is a new entry there, which fails a test here
until the table covers it.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.aws import names
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import (
    botocore_model,
    cluster_spec,
    eks_render,
    hyperpod_render,
    pcluster_render,
    pcs_render,
    target_limits,
)

from tests.support import REPO
from tests.unit.plugins.cluster_examples import AMI, EXAMPLE_SPECS, FOUNDATION

pytestmark = pytest.mark.cluster

SNAPSHOT = json.loads((Path(__file__).parent / "fixtures" / "pcluster_limits.json").read_text())
GOLDEN = REPO / "tests" / "unit" / "plugins" / "modules" / "fixtures" / "cluster_module_renders.json"
P5 = yaml.safe_load(EXAMPLE_SPECS["p5"].read_text())


def refusal(spec: dict[str, Any]) -> list[str]:
    with pytest.raises(cluster_spec.ClusterSpecError) as caught:
        cluster_spec.normalise(spec, "bad")
    return caught.value.problems


def changed(**changes: Any) -> dict[str, Any]:
    """The p5 example with dotted keys replaced (`queues.1.name`)."""
    spec = copy.deepcopy(P5)
    for dotted, value in changes.items():
        *path, last = dotted.split(".")
        here: Any = spec
        for part in path:
            here = here[int(part)] if part.isdigit() else here.setdefault(part, {})
        here[int(last) if last.isdigit() else last] = value
    return spec


# ---------------------------------------------------------------- ParallelCluster, through the snapshot


def test_every_pcluster_rule_of_the_pinned_release_is_reviewed() -> None:
    """A constant or validator scripts/pcluster_limits.py does not classify is written `unreviewed`."""
    unreviewed = [
        f"{kind} {name}"
        for kind in ("constants", "validators")
        for name, entry in SNAPSHOT[kind].items()
        if entry["status"] == "unreviewed"
    ]
    assert not unreviewed, f"classify these in scripts/pcluster_limits.py, then mirror them: {unreviewed}"


@pytest.mark.parametrize(
    "name", sorted(n for n, e in SNAPSHOT["constants"].items() if e["status"].startswith("mirrored"))
)
def test_mirrored_pcluster_constants_equal_the_pinned_release(name: str) -> None:
    entry = SNAPSHOT["constants"][name]
    ours = entry["status"].split(": ", 1)[1]
    assert getattr(target_limits, ours) == entry["value"], (
        f"target_limits.{ours} differs from pcluster {name}"
    )


@pytest.mark.parametrize(
    "name", sorted(n for n, e in SNAPSHOT["validators"].items() if e["status"].startswith("mirrored"))
)
def test_mirrored_pcluster_validators_have_their_check(name: str) -> None:
    """Each `mirrored: <module>.<name>` names a check that exists; a table row cites the validator."""
    for where in re.findall(r"(\w+)\.(\w+)", SNAPSHOT["validators"][name]["status"]):
        module, attr = where
        if module == "target_limits" and attr in ("RULES", "COUNT_LIMITS"):
            rows = getattr(target_limits, attr)
            assert any(name in row.source for row in rows), f"no row of target_limits.{attr} cites {name}"
        else:
            owner = {"cluster_spec": cluster_spec, "pcluster_render": pcluster_render}[module]
            assert hasattr(owner, attr), f"{module}.{attr} (mirroring {name}) is gone"


def test_reserved_names_and_directories_equal_the_validators_literals() -> None:
    assert tuple(SNAPSHOT["literals"]["NameValidator"]) == target_limits.PCLUSTER_RESERVED_NAMES
    assert tuple(SNAPSHOT["literals"]["SharedStorageMountDirValidator"]) == (
        target_limits.PCLUSTER_RESERVED_MOUNT_DIRS
    )


def _pcluster_leaf_paths() -> set[str]:
    paths: set[str] = set()
    for path in EXAMPLE_SPECS.values():
        spec = cluster_spec.load_file(path)
        foundation = {
            **FOUNDATION,
            "database": {"uri": "db:3306", "user_name": "slurm", "password_secret_arn": "arn:aws:x:secret"},
        }
        paths |= leaf_paths(pcluster_render.render(spec, foundation, AMI))
    return paths


def leaf_paths(data: Any, path: str = "") -> set[str]:
    """The same leaves scripts/pcluster_limits.py reads ([] for every item of a list)."""
    if isinstance(data, dict):
        return {p for key, value in data.items() for p in leaf_paths(value, f"{path}.{key}" if path else key)}
    if isinstance(data, list):
        return {p for item in data for p in leaf_paths(item, f"{path}[]")}
    return {path}


def test_the_snapshot_covers_every_field_our_renderer_fills() -> None:
    """The snapshot holds the schema rules of the rendered fields; a field rendered since is not covered."""
    assert _pcluster_leaf_paths() == set(SNAPSHOT["schema"])


# How each schema rule of a rendered field is met: a rule of target_limits (its name), the spec's schema (the
# key and a check of the bound), our renderer's mapping (a dict whose values must be choices), or a value that
# never comes from the spec.
FOUNDATION_VALUE = "a foundation output, not the spec's"
FIXED = "a constant of pcluster_render"
SCHEMA_COVERAGE: dict[str, Any] = {
    "HeadNode.Iam.S3Access[].BucketName": FOUNDATION_VALUE,
    "Scheduling.SlurmQueues[].Iam.S3Access[].BucketName": FOUNDATION_VALUE,
    "Scheduling.SlurmSettings.Database.PasswordSecretArn": FOUNDATION_VALUE,
    "HeadNode.Networking.SubnetId": ("PCLUSTER_SUBNET_ID_REGEX", "network.public_subnet_id"),
    "Image.CustomAmi": ("PCLUSTER_AMI_ID_REGEX", "image.ami_id"),
    "SharedStorage[].MountDir": ("PCLUSTER_MOUNT_DIR_REGEX", "shared_storage.fsx_lustre.mount_dir"),
    "Image.Os": pcluster_render.PCLUSTER_OS,
    "Scheduling.SlurmQueues[].CapacityType": pcluster_render.CAPACITY_TYPE,
    "SharedStorage[].FsxLustreSettings.DeploymentType": {d: d for d in cluster_spec.DEPLOYMENT_TYPES},
    "Scheduling.SlurmQueues[].ComputeResources[].MaxCount": ("schema", ("$defs", "queue", "max_count")),
    "Scheduling.SlurmQueues[].ComputeResources[].MinCount": ("schema", ("$defs", "queue", "min_count")),
    "LoginNodes.Pools[].Count": ("schema", ("properties", "login_nodes", "count")),
    "Tags[].Value": ("PCLUSTER_TAG_VALUE_REGEX", "image.stack"),
    "Tags[].Key": FIXED,
    "Scheduling.Scheduler": FIXED,
    "SharedStorage[].StorageType": FIXED,
    "SharedStorage[].FsxLustreSettings.DataRepositoryAssociations[].FileSystemPath": FIXED,
    "LoginNodes.Pools[].Networking.SubnetIds[]": "one subnet",
    "Scheduling.SlurmQueues[].Networking.SubnetIds[]": "one subnet",
}


def _schema_minimum(where: tuple[str, ...]) -> int:
    node: Any = cluster_spec.SCHEMA
    if where[0] == "$defs":
        node = node["$defs"][where[1]]["properties"][where[2]]
    else:
        node = node["properties"][where[1]]["properties"][where[2]]
    return node["minimum"]


@pytest.mark.parametrize("path", sorted(p for p, rules in SNAPSHOT["schema"].items() if rules))
def test_each_schema_rule_of_a_rendered_field_is_met(path: str) -> None:
    rules = SNAPSHOT["schema"][path]
    assert path in SCHEMA_COVERAGE, f"ParallelCluster's schema checks {path} ({rules}): cover it"
    how = SCHEMA_COVERAGE[path]
    if isinstance(how, dict):
        choices = re.fullmatch(r"OneOf\((.*)\)", rules[0]).group(1)
        assert all(repr(value) in choices for value in how.values()), (path, rules)
    elif isinstance(how, tuple) and how[0] == "schema":
        low = int(re.search(r"min=(\d+)", rules[0]).group(1))
        assert _schema_minimum(how[1]) >= low, (path, rules)
    elif isinstance(how, tuple):
        name, key = how
        assert f"Regexp({getattr(target_limits, name)})" in rules or name == "PCLUSTER_TAG_VALUE_REGEX", rules
        assert any(r.key == key and r.pattern == getattr(target_limits, name) for r in target_limits.RULES)


NAME_MAX = SNAPSHOT["constants"]["PCLUSTER_NAME_MAX_LENGTH"]["value"]
QUEUE_NAME_MAX = SNAPSHOT["constants"]["NAME_MAX_LENGTH"]["value"]
MAX_QUEUES = SNAPSHOT["constants"]["MAX_NUMBER_OF_QUEUES"]["value"]
PCLUSTER_CASES = [
    ("name", "a" * (NAME_MAX + 1)),
    ("name", "1train"),
    ("name", "train_p5"),
    ("queues.1.name", "q" * (QUEUE_NAME_MAX + 1)),
    *[("queues.1.name", reserved) for reserved in SNAPSHOT["literals"]["NameValidator"]],
    *[
        ("shared_storage.fsx_lustre.mount_dir", directory)
        for directory in SNAPSHOT["literals"]["SharedStorageMountDirValidator"]
    ],
    ("shared_storage.fsx_lustre.mount_dir", "/fsx/"),
    ("image.ami_id", "ami-0123456789"),
    ("network.public_subnet_id", "subnet-0a1b2c3d4e5f"),
]


@pytest.mark.parametrize(("key", "value"), PCLUSTER_CASES, ids=[f"{k}={v}"[:60] for k, v in PCLUSTER_CASES])
def test_what_pcluster_refuses_is_refused_naming_the_key(key: str, value: Any) -> None:
    spec = changed(**{key: value})
    where = re.sub(r"\.(\d+)\.", r"[\1].", key)
    problems = [p for p in refusal(spec) if p.startswith(f"bad: {where}: ")]
    # The spec's JSON Schema refuses some first (its own pattern or length); the others name the target.
    by_schema = [p for p in problems if re.search(r"(does not match|must be at most \d+ characters long)", p)]
    assert by_schema or any("ParallelCluster" in p for p in problems), problems


def test_more_queues_than_pcluster_takes_are_refused() -> None:
    queue = {"instance_type": "p5.48xlarge", "max_count": 1}
    spec = changed(queues=[{"name": f"q{index:03d}", **queue} for index in range(MAX_QUEUES + 1)])
    assert f"bad: queues: {MAX_QUEUES + 1} Slurm queues; ParallelCluster takes at most {MAX_QUEUES} " in (
        " ".join(refusal(spec))
    )


def test_a_long_name_with_slurm_accounting_is_refused() -> None:
    limit = SNAPSHOT["constants"]["PCLUSTER_NAME_MAX_LENGTH_SLURM_ACCOUNTING"]["value"]
    problems = refusal(changed(name="t" * (limit + 1), slurm_accounting=True))
    assert any("ParallelCluster: cluster name with Slurm accounting" in p for p in problems), problems


# ---------------------------------------------------------------- botocore's models

SERVICE_TARGET = {
    "sagemaker": target_limits.HYPERPOD,
    "pcs": target_limits.PCS,
    "eks": target_limits.EKS,
    "batch": target_limits.BATCH,
}
# The requests of each module's golden render: (service, operation) of each list of requests.
REQUESTS = {
    "batch_cluster": {
        "launch_templates": ("ec2", "CreateLaunchTemplate"),
        "compute_environments": ("batch", "CreateComputeEnvironment"),
        "job_queues": ("batch", "CreateJobQueue"),
        "job_definitions": ("batch", "RegisterJobDefinition"),
    },
    "eks_cluster": {
        "cluster": ("eks", "CreateCluster"),
        "launch_templates": ("ec2", "CreateLaunchTemplate"),
        "node_groups": ("eks", "CreateNodegroup"),
    },
    "hyperpod_cluster": {"request": ("sagemaker", "CreateCluster")},
    "pcs_cluster": {
        "cluster": ("pcs", "CreateCluster"),
        "node_groups": ("pcs", "CreateComputeNodeGroup"),
        "queues": ("pcs", "CreateQueue"),
    },
}
# Constrained members filled from a spec value that a renderer builds into a longer name: the renderer checks
# the whole name (launch_template.name_problems, batch_render.NAME), so no spec key alone can.
COMPOSITE = {("ec2", "CreateLaunchTemplate", "LaunchTemplateName")}


def _constraints(shape: Any) -> dict[str, Any]:
    found = {k: v for k, v in shape.metadata.items() if k in ("pattern", "min", "max")}
    if getattr(shape, "enum", None):
        found["enum"] = tuple(shape.enum)
    return found


def _walk(value: Any, shape: Any, path: str, out: list[tuple[str, Any, Any]]) -> None:
    """(member path, shape, value) of every scalar of a request; map values under the map's own path."""
    if shape.type_name == "structure" and isinstance(value, dict):
        for key, member in shape.members.items():
            if key in value:
                _walk(value[key], member, f"{path}.{key}" if path else key, out)
    elif shape.type_name == "list" and isinstance(value, list):
        for item in value:
            _walk(item, shape.member, f"{path}[]", out)
    elif shape.type_name == "map" and isinstance(value, dict):
        for item in value.values():
            _walk(item, shape.value, path, out)
    else:
        out.append((path, shape, value))


def _spec_strings(spec: dict[str, Any]) -> set[str]:
    """The spec's words a request may carry: its name, queue names, stack, mount dir, key, AMI, subnets."""
    words = {spec["name"], spec["image"]["stack"], *(q["name"] for q in spec["queues"])}
    words |= {spec["image"].get("ami_id"), spec["head_node"].get("ssh_key_name")}
    words |= {spec["network"].get(k) for k in ("public_subnet_id", "private_subnet_id")}
    words.add((spec["shared_storage"].get("fsx_lustre") or {}).get("mount_dir"))
    return {w for w in words if w}


def filled_members() -> dict[tuple[str, str, str], set[str]]:
    """Every constrained request member of the golden renders whose value is, or contains, one of the spec's
    words, with the values seen: the members our renderers fill from spec values."""
    golden = json.loads(GOLDEN.read_text())
    found: dict[tuple[str, str, str], set[str]] = {}
    for entry, result in golden.items():
        module, kind, stem = entry.split("/")
        requests = result.get("requests") or {"request": result.get("request")}
        words = _spec_strings(cluster_spec.load_file(REPO / "inventories" / "aws" / kind / f"{stem}.yml"))
        for key, (service, operation) in REQUESTS[module].items():
            items = requests.get(key) or []
            shape = botocore_model.service_model(service).operation_model(operation).input_shape
            for request in items if isinstance(items, list) else [items]:
                leaves: list[tuple[str, Any, Any]] = []
                _walk(request, shape, "", leaves)
                for path, leaf, value in leaves:
                    if _constraints(leaf) and isinstance(value, str) and any(w in value for w in words):
                        found.setdefault((service, operation, path), set()).add(value)
    return found


FILLED = filled_members()


def test_the_golden_renders_fill_constrained_members_from_the_spec() -> None:
    """The derivation below has something to derive from (a render that fills none would pass vacuously)."""
    assert ("sagemaker", "CreateCluster", "ClusterName") in FILLED
    assert ("pcs", "CreateQueue", "queueName") in FILLED


@pytest.mark.parametrize("member", sorted(FILLED), ids=["/".join(m) for m in sorted(FILLED)])
def test_every_constrained_member_filled_from_the_spec_has_a_rule(member: tuple[str, str, str]) -> None:
    service, operation, path = member
    if member in COMPOSITE:
        return
    field = f"{operation}.{path}"
    rows = [r for r in target_limits.RULES if r.field == field and r.target == SERVICE_TARGET[service]]
    assert rows, f"{service} {field} is filled from the spec ({sorted(FILLED[member])}) but has no rule"


MODEL_ROWS = [r for r in target_limits.RULES if r.source.split(" ")[0] in SERVICE_TARGET]


@pytest.mark.parametrize("rule", MODEL_ROWS, ids=[f"{r.key}:{r.target}:{r.field}" for r in MODEL_ROWS])
def test_each_botocore_row_equals_its_shape(rule: target_limits.Rule) -> None:
    """The row's pattern and bounds are the installed model's, so a model change fails here first."""
    service, shape_name = rule.source.split(" ")
    shape = botocore_model.service_model(service).shape_for(shape_name)
    model = _constraints(shape)
    if "enum" in model:
        mapping = {
            "ClusterInstanceType": None,
            "PurchaseOption": pcs_render.PURCHASE_OPTION,
            "CapacityTypes": eks_render.CAPACITY_TYPE,
        }[shape_name]
        assert mapping is None or set(mapping.values()) <= set(model["enum"])
        return
    if shape.type_name == "string":
        ours = {"pattern": rule.pattern, "min": rule.min_len, "max": rule.max_len}
    else:
        ours = {"min": rule.minimum, "max": rule.maximum}
    assert {k: v for k, v in ours.items() if v is not None} == model, (rule, model)


COUNT_ROWS = {
    target_limits.HYPERPOD: ("sagemaker", "ClusterInstanceGroupSpecifications"),
}


def test_the_instance_group_limit_is_the_models() -> None:
    service, shape_name = COUNT_ROWS[target_limits.HYPERPOD]
    shape = botocore_model.service_model(service).shape_for(shape_name)
    assert shape.metadata["max"] == target_limits.HYPERPOD_MAX_INSTANCE_GROUPS


BOTOCORE_CASES = [
    ("name", "ab", "AWS PCS"),
    ("name", "train-", "SageMaker HyperPod"),
    ("name", "t" * 41, "AWS PCS"),
    ("queues.1.name", "gp", "AWS PCS"),
    ("queues.1.name", "debug-", "SageMaker HyperPod"),
    ("queues.1.name", "controller", "SageMaker HyperPod"),
    ("queues.1.name", "login", "AWS PCS"),
    ("queues.1.max_count", target_limits.HYPERPOD_MAX_INSTANCE_COUNT + 1, "SageMaker HyperPod"),
    ("login_nodes.count", target_limits.HYPERPOD_MAX_INSTANCE_COUNT + 1, "SageMaker HyperPod"),
    ("shared_storage.fsx_lustre.mount_dir", "/", "SageMaker HyperPod"),
    ("image.stack", "s" * 64, "Amazon EKS"),
]


@pytest.mark.parametrize(
    ("key", "value", "target"), BOTOCORE_CASES, ids=[f"{case[0]}={case[1]}"[:50] for case in BOTOCORE_CASES]
)
def test_what_a_service_model_refuses_is_refused_naming_the_key(key: str, value: Any, target: str) -> None:
    where = re.sub(r"\.(\d+)\.", r"[\1].", key)
    if key == "queues.1.max_count":
        where = "queues[1].max_count"
    problems = refusal(changed(**{key: value}))
    assert any(p.startswith(f"bad: {where}: ") and target in p for p in problems), problems


def test_more_queues_than_hyperpod_groups_take_would_be_refused() -> None:
    """HyperPod's 100 groups lie above ParallelCluster's 50 queues; the count is still checked, on its own."""
    limit = next(c for c in target_limits.COUNT_LIMITS if c.target == target_limits.HYPERPOD)
    spec = {"queues": [{}] * 98, "login_nodes": {"count": 1}}
    assert target_limits.count_of(limit, spec) == 100
    assert target_limits.count_of(limit, {"queues": [{}] * 99, "login_nodes": {}}) == 100


# ---------------------------------------------------------------- region and node types, from botocore's data


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"region": "us-west-22", "availability_zone": "us-west-22b"},
            "bad: region: us-west-22 is not an AWS region (botocore's endpoint partitions); did you mean "
            "us-west-2?",
        ),
        (
            {"region": "eu-wset-1", "availability_zone": "eu-wset-1a"},
            "bad: region: eu-wset-1 is not an AWS region (botocore's endpoint partitions); did you mean "
            "eu-west-1?",
        ),
        (
            {"head_node.instance_type": "m7i.4xlarg"},
            "bad: head_node.instance_type: 'm7i.4xlarg' is neither in the instance catalog "
            "(stacks/instance_types.yml) nor an EC2 instance type (botocore's EC2 model); did you mean "
            "m7i.4xlarge?",
        ),
        (
            {"login_nodes.instance_type": "m7x.2xlarge"},
            "bad: login_nodes.instance_type: 'm7x.2xlarge' is neither in the instance catalog "
            "(stacks/instance_types.yml) nor an EC2 instance type (botocore's EC2 model); did you mean "
            "m7i.2xlarge?",
        ),
        (
            {"head_node.instance_type": "p5.48xlarg"},
            "bad: head_node.instance_type: 'p5.48xlarg' is neither in the instance catalog "
            "(stacks/instance_types.yml) nor an EC2 instance type (botocore's EC2 model); did you mean "
            "p5.48xlarge?",
        ),
    ],
)
def test_a_region_or_node_type_typo_is_refused_with_a_suggestion(changes: dict, expected: str) -> None:
    assert expected in refusal(changed(**changes))


def test_regions_and_types_of_every_partition_pass() -> None:
    for region in ("us-gov-west-1", "cn-north-1", "eu-central-2"):
        assert region in names.known_regions()
    for itype in ("m7i.4xlarge", "t3.micro", "p5.48xlarge"):
        assert itype in target_limits.ec2_instance_types()


def test_every_example_spec_meets_every_target() -> None:
    for kind in ("batch", "eks", "hyperpod", "clusters"):
        for path in sorted((REPO / "inventories" / "aws" / kind).glob("*.yml")):
            cluster_spec.load_file(path)


def test_the_group_names_our_renderers_keep_are_the_tables() -> None:
    """target_limits cannot import the renderers (they import cluster_spec, which imports it): held here."""
    assert target_limits.CONTROLLER_GROUP == hyperpod_render.CONTROLLER_GROUP
    assert target_limits.LOGIN_GROUP == hyperpod_render.LOGIN_GROUP == pcs_render.LOGIN_GROUP
    assert hyperpod_render.GROUP_NAME.pattern == target_limits.HYPERPOD_NAME
