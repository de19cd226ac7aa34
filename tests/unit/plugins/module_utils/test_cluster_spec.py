"""The cluster spec (module_utils/cluster/cluster_spec.py, published as stacks/schema/cluster.schema.json).

Each refusal must name the file, the dotted key and the rule; the schema runs before any rule, and the rules
read the real instance catalog and the real stack files (ts-2025.12 lacks p6e-gb200: a real scope gap).
"""

from __future__ import annotations

import copy
import json
import re

import jsonschema
import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import cluster_spec

from tests.support import REPO, case_params
from tests.unit.plugins.module_utils.cluster_specs import minimal_spec

pytestmark = pytest.mark.cluster

SCHEMA_FILE = REPO / "stacks" / "schema" / "cluster.schema.json"
EXAMPLE_SPECS = sorted((REPO / "inventories" / "aws" / "clusters").glob("*.yml"))
SOURCE = "clusters/test.yml"

GOOD = minimal_spec(shared_storage={"fsx_lustre": {"storage_capacity_gib": 1200}})


def spec_with(*changes: tuple[tuple, object]) -> dict:
    """GOOD with values set (a path ending in a key) or removed (value DELETE)."""
    spec = copy.deepcopy(GOOD)
    for path, value in changes:
        node = spec
        for key in path[:-1]:
            node = node[key]
        if value is DELETE:
            del node[path[-1]]
        else:
            node[path[-1]] = value
    return spec


DELETE = object()


def refusal(spec: dict) -> str:
    with pytest.raises(cluster_spec.ClusterSpecError) as err:
        cluster_spec.normalise(spec, SOURCE)
    return str(err.value)


def test_published_schema_is_the_one_the_checker_applies():
    published = json.loads(SCHEMA_FILE.read_text())
    assert published == cluster_spec.SCHEMA, (
        "stacks/schema/cluster.schema.json differs from module_utils/cluster/cluster_spec.py SCHEMA; rewrite "
        "it with json.dumps(SCHEMA, indent=2)"
    )
    jsonschema.Draft202012Validator.check_schema(published)


@pytest.mark.parametrize("path", EXAMPLE_SPECS, ids=[p.stem for p in EXAMPLE_SPECS])
def test_example_specs_pass_our_checks_and_json_schema(path):
    data = yaml.safe_load(path.read_text())
    assert list(jsonschema.Draft202012Validator(cluster_spec.SCHEMA).iter_errors(data)) == []
    assert cluster_spec.load_file(path)["name"] == data["name"]


def test_examples_cover_each_gpu_family():
    families = {
        q["instance_type"].split(".")[0]
        for p in EXAMPLE_SPECS
        for q in yaml.safe_load(p.read_text())["queues"]
    }
    assert {"p4d", "p6-b200", "g6e"} <= families and families & {"p5", "p5en"}


def test_defaults_are_filled_from_the_catalog_and_the_deployment_type():
    spec = cluster_spec.normalise(
        spec_with(
            (
                ("queues",),
                [GOOD["queues"][0], {"name": "cpu-less", "instance_type": "g6.48xlarge", "max_count": 1}],
            ),
        )
    )
    p5, g6 = spec["queues"]
    assert (p5["efa"], p5["placement_group"], p5["min_count"], p5["capacity_type"]) == (
        True,
        True,
        0,
        "on_demand",
    )
    assert (g6["efa"], g6["placement_group"]) == (True, True)
    fsx = spec["shared_storage"]["fsx_lustre"]
    assert (fsx["deployment_type"], fsx["per_unit_storage_throughput"], fsx["mount_dir"]) == (
        "PERSISTENT_2",
        125,
        "/fsx",
    )
    assert (spec["slurm_accounting"], spec["monitoring"], spec["shared_storage"]["efs_home"]) == (
        False,
        True,
        False,
    )
    assert spec["network"]["cidr"] == "10.0.0.0/16"


def test_efa_defaults_off_for_a_type_without_efa():
    spec = cluster_spec.normalise(
        spec_with((("queues", 0, "instance_type"), "g5g.16xlarge"), (("image", "os"), "ubuntu-24.04"))
    )
    assert (spec["queues"][0]["efa"], spec["queues"][0]["placement_group"]) == (False, False)


def test_normalise_does_not_change_its_input():
    given = copy.deepcopy(GOOD)
    cluster_spec.normalise(given)
    assert given == GOOD


# ---------------------------------------------------------------- schema: shape


SCHEMA_CASES = [
    ("unknown-top", ((("tags",), {"a": "b"}),), "tags: unknown key"),
    ("misspelt-top", ((("monitring",), True),), "monitring: unknown key (did you mean 'monitoring'?)"),
    (
        "misspelt-queue",
        ((("queues", 0, "max_cuont"), 2), (("queues", 0, "max_count"), DELETE)),
        "queues[0].max_cuont: unknown key (did you mean 'max_count'?)",
    ),
    ("missing-required", ((("queues", 0, "max_count"), DELETE),), "queues[0].max_count: is required"),
    (
        "misspelt-fsx",
        ((("shared_storage", "fsx_lustre", "storage_capacity"), 1200),),
        "shared_storage.fsx_lustre.storage_capacity: unknown key (did you mean 'storage_capacity_gib'?)",
    ),
    (
        "wrong-type-count",
        ((("queues", 0, "max_count"), "2"),),
        "queues[0].max_count: must be integer, not a string",
    ),
    ("wrong-type-bool", ((("queues", 0, "efa"), "yes"),), "queues[0].efa: must be boolean, not a string"),
    ("wrong-type-queues", ((("queues",), {"name": "gpu"}),), "queues: must be array, not a mapping"),
    ("null-network", ((("network",), None),), "network: must be object, not null"),
    ("null-shared-storage", ((("shared_storage",), None),), "shared_storage: must be object, not null"),
    (
        "null-fsx",
        ((("shared_storage", "fsx_lustre"), None),),
        "shared_storage.fsx_lustre: must be object, not null",
    ),
    ("null-image", ((("image",), None),), "image: must be object, not null"),
    (
        "enum-capacity",
        ((("queues", 0, "capacity_type"), "reserved"),),
        "queues[0].capacity_type: 'reserved' is not one of",
    ),
    (
        "enum-deployment",
        ((("shared_storage", "fsx_lustre", "deployment_type"), "SCRATCH_3"),),
        "shared_storage.fsx_lustre.deployment_type: 'SCRATCH_3' is not one of",
    ),
    (
        "minimum-count",
        ((("queues", 0, "max_count"), 0),),
        "queues[0].max_count: 0 is less than the minimum 1",
    ),
    (
        "max-length-name",
        ((("queues", 0, "name"), "q" * 26),),
        "queues[0].name: must be at most 25 characters long",
    ),
    ("pattern-ami", ((("image", "ami_id"), "ami-XYZ"),), "image.ami_id: 'ami-XYZ' does not match"),
    (
        "existing-vpc-needs-subnets",
        ((("network", "vpc"), "existing"),),
        "network.public_subnet_id: is required",
    ),
    ("empty-queues", ((("queues",), []),), "queues: needs at least 1 item(s)"),
]


@pytest.mark.parametrize(("changes", "fragment"), case_params(SCHEMA_CASES))
def test_schema_refuses_with_file_and_key(changes, fragment):
    assert f"{SOURCE}: {fragment}" in refusal(spec_with(*changes))


def test_schema_runs_before_the_rules():
    """A spec both malformed and breaking a rule is refused for its shape only: rules see valid specs."""
    message = refusal(spec_with((("queues", 0, "instance_type"), "x9.huge"), (("queues", 0, "efa"), "yes")))
    assert "queues[0].efa: must be boolean" in message
    assert "instance catalog" not in message


# ---------------------------------------------------------------- rules beyond the schema


RULE_CASES = [
    (
        "unknown-instance-type",
        ((("queues", 0, "instance_type"), "p9.48xlarge"),),
        "queues[0].instance_type: 'p9.48xlarge' is not in the instance catalog (stacks/instance_types.yml)",
    ),
    (
        "efa-on-type-without-efa",
        ((("queues", 0, "instance_type"), "g5g.16xlarge"), (("queues", 0, "efa"), True)),
        "queues[0].efa: g5g.16xlarge has no EFA interface in the instance catalog; set efa: false",
    ),
    (
        "fsx-scratch1-step",
        ((("shared_storage", "fsx_lustre"), {"deployment_type": "SCRATCH_1", "storage_capacity_gib": 4800}),),
        "shared_storage.fsx_lustre.storage_capacity_gib: 4800 GiB is not a size SCRATCH_1 accepts "
        "(1200, 2400, or a multiple of 3600)",
    ),
    (
        "fsx-persistent2-step",
        ((("shared_storage", "fsx_lustre", "storage_capacity_gib"), 3600),),
        "shared_storage.fsx_lustre.storage_capacity_gib: 3600 GiB is not a size PERSISTENT_2 accepts "
        "(1200, 2400, or a multiple of 2400)",
    ),
    (
        "fsx-throughput-persistent2",
        ((("shared_storage", "fsx_lustre", "per_unit_storage_throughput"), 200),),
        "shared_storage.fsx_lustre.per_unit_storage_throughput: 200 MB/s/TiB is not one PERSISTENT_2 accepts "
        "(125, 250, 500, 1000)",
    ),
    (
        "fsx-throughput-persistent1",
        (
            (
                ("shared_storage", "fsx_lustre"),
                {
                    "deployment_type": "PERSISTENT_1",
                    "storage_capacity_gib": 2400,
                    "per_unit_storage_throughput": 125,
                },
            ),
        ),
        "shared_storage.fsx_lustre.per_unit_storage_throughput: 125 MB/s/TiB is not one PERSISTENT_1 accepts "
        "(50, 100, 200)",
    ),
    (
        "fsx-throughput-on-scratch",
        (
            (
                ("shared_storage", "fsx_lustre"),
                {
                    "deployment_type": "SCRATCH_2",
                    "storage_capacity_gib": 1200,
                    "per_unit_storage_throughput": 200,
                },
            ),
        ),
        "shared_storage.fsx_lustre.per_unit_storage_throughput: SCRATCH_2 takes no per-unit throughput",
    ),
    (
        "stack-lacks-family",
        ((("queues", 0, "instance_type"), "p6e-gb200.36xlarge"), (("image", "stack"), "ts-2025.12")),
        "queues[0].instance_type: stack ts-2025.12 (image.stack) does not support the p6e-gb200 family of "
        "p6e-gb200.36xlarge",
    ),
    (
        "stack-unknown",
        ((("image", "stack"), "ts-1999.01"),),
        "image.stack: trainstack_stack=ts-1999.01: no such stack",
    ),
    ("image-both-ways", ((("image", "tags"), {"Name": "x"}),), "image: give exactly one of ami_id"),
    ("image-neither-way", ((("image", "ami_id"), DELETE),), "image: give exactly one of ami_id"),
    ("min-over-max", ((("queues", 0, "min_count"), 3),), "queues[0].min_count: 3 is more than max_count (2)"),
    (
        "spot-with-reservation",
        (
            (("queues", 0, "capacity_type"), "spot"),
            (("queues", 0, "capacity_reservation_id"), "cr-0123456789abcdef0"),
        ),
        "queues[0].capacity_reservation_id: a spot queue cannot use a capacity reservation",
    ),
    (
        "block-without-id",
        ((("queues", 0, "capacity_type"), "capacity_block"), (("queues", 0, "min_count"), 2)),
        "queues[0].capacity_reservation_id: is required when capacity_type is capacity_block",
    ),
    (
        "block-not-static",
        (
            (("queues", 0, "capacity_type"), "capacity_block"),
            (("queues", 0, "capacity_reservation_id"), "cr-0123456789abcdef0"),
        ),
        "queues[0].min_count: a Capacity Block queue runs its reserved instances as static nodes",
    ),
    (
        "zone-outside-region",
        ((("availability_zone",), "eu-west-1a"),),
        "availability_zone: eu-west-1a is not a zone of region us-east-1",
    ),
    (
        "duplicate-queue",
        ((("queues",), [GOOD["queues"][0], GOOD["queues"][0]]),),
        "queues[1].name: 'gpu' is already the name of queues[0]",
    ),
    (
        "mixed-arch",
        (
            (
                ("queues",),
                [GOOD["queues"][0], {"name": "arm", "instance_type": "g5g.16xlarge", "max_count": 1}],
            ),
        ),
        "queues[1].instance_type: is aarch64 but queues[0] is x86_64; one image serves one architecture",
    ),
    (
        "new-vpc-with-subnet",
        ((("network", "public_subnet_id"), "subnet-0123456789abcdef0"),),
        "network.public_subnet_id: a new VPC (vpc: new) makes its own subnets; remove it",
    ),
    (
        "existing-vpc-with-cidr",
        (
            (
                ("network",),
                {
                    "vpc": "existing",
                    "cidr": "10.1.0.0/16",
                    "public_subnet_id": "subnet-0123456789abcdef0",
                    "private_subnet_id": "subnet-0123456789abcdef1",
                },
            ),
        ),
        "network.cidr: an existing VPC (vpc: existing) keeps its own address range; remove it",
    ),
]


@pytest.mark.parametrize(("changes", "fragment"), case_params([c for c in RULE_CASES if c[2]]))
def test_rules_refuse_naming_key_and_rule(changes, fragment):
    assert f"{SOURCE}: {fragment}" in refusal(spec_with(*changes))


@pytest.mark.parametrize(
    "fsx",
    [{"deployment_type": "SCRATCH_1", "storage_capacity_gib": size} for size in (1200, 2400, 3600, 7200)]
    + [
        {"deployment_type": kind, "storage_capacity_gib": size}
        for kind in ("SCRATCH_2", "PERSISTENT_2")
        for size in (1200, 2400, 4800, 9600)
    ]
    + [
        {"deployment_type": "PERSISTENT_1", "storage_capacity_gib": 2400, "per_unit_storage_throughput": t}
        for t in (50, 100, 200)
    ]
    + [
        {"deployment_type": "PERSISTENT_2", "storage_capacity_gib": 1200, "per_unit_storage_throughput": t}
        for t in (125, 250, 500, 1000)
    ],
    ids=lambda fsx: "-".join(str(v) for v in fsx.values()),
)
def test_fsx_sizes_and_throughputs_aws_accepts_pass(fsx):
    cluster_spec.normalise(spec_with((("shared_storage", "fsx_lustre"), fsx)))


def test_stack_that_covers_the_family_passes():
    """The same p6e-gb200 queue that ts-2025.12 refuses passes with ts-2026.10 (it lists the family)."""
    cluster_spec.normalise(
        spec_with((("queues", 0, "instance_type"), "p6e-gb200.36xlarge"), (("image", "os"), "ubuntu-24.04"))
    )


def test_every_problem_is_reported_at_once():
    message = refusal(
        spec_with(
            (("queues", 0, "min_count"), 3),
            (("shared_storage", "fsx_lustre", "storage_capacity_gib"), 3600),
            (("availability_zone",), "eu-west-1a"),
        )
    )
    assert len(re.findall(rf"^{re.escape(SOURCE)}: ", message, flags=re.M)) == 3


def test_file_errors_name_the_file(tmp_path):
    two = tmp_path / "two.yml"
    two.write_text("---\nname: a\n---\nname: b\n")
    with pytest.raises(
        cluster_spec.ClusterSpecError, match=rf"{re.escape(str(two))}: must hold exactly one YAML document"
    ):
        cluster_spec.load_file(two)
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump({**GOOD, "monitoring": "on"}))
    with pytest.raises(
        cluster_spec.ClusterSpecError, match=rf"{re.escape(str(bad))}: monitoring: must be boolean"
    ):
        cluster_spec.load_file(bad)
