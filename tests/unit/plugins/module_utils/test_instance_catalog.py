"""The instance catalog loader: the committed catalog, its generated module, merging, lookups, bad entries."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.catalog import instance_catalog as ic
from ansible_collections.trainstack.cluster.plugins.module_utils.stack import stack_matrix as sm

REPO = Path(__file__).resolve().parents[4]
SOURCE = REPO / "stacks" / "instance_types.yml"
REQUIRED = [
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
    "p6-b300.48xlarge",
    "p6e-gb200.36xlarge",
    "g5.48xlarge",
    "g6.48xlarge",
    "g6e.48xlarge",
    "trn1.32xlarge",
    "trn2.48xlarge",
    "lab",
    "local",
]


@pytest.fixture
def data() -> dict:
    return yaml.safe_load(SOURCE.read_text(encoding="utf-8"))


def refused(data: dict, match: str) -> None:
    with pytest.raises(ic.CatalogError, match=match):
        ic.Catalog(data)


# ------------------------------------------------------------------------------------- the committed catalog
def test_generated_module_matches_the_yaml() -> None:
    # Modules and node-side code read the generated module; it must hold exactly what the YAML says.
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "instance_catalog.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert ic.default().as_data() == ic.load_file(str(SOURCE)).as_data()


def test_catalog_covers_every_type_the_collection_uses() -> None:
    names = ic.default().names()
    assert [name for name in REQUIRED if name not in names] == []
    assert "h200x1" not in names


def test_entries_merge_defaults_family_and_type() -> None:
    p5 = ic.default().get("p5.48xlarge")
    assert (p5.family, p5.gpu_count, p5.gpu_model, p5.gpu_memory_mib) == ("p5", 8, "H100", 81920)
    assert (p5.gpu_generation, p5.gpu_arch, p5.efa_interfaces) == ("hopper", "sm_90", 32)
    assert p5.gpudirect_rdma and p5.nvswitch and p5.nvlink_links_per_gpu == 18
    assert p5.bf16_dense_flops == pytest.approx(989.4e12)
    # env merges key by key: the default socket rule, the family's EFA settings.
    assert p5.env == {
        "NCCL_SOCKET_IFNAME": "^docker,lo,veth",
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        "NCCL_BUFFSIZE": "8388608",
    }
    assert p5.health["mounts"] == ["/fsx"] and p5.sources[0].startswith("https://aws.amazon.com/")


def test_values_that_differed_between_the_old_tables() -> None:
    catalog = ic.default()
    assert catalog.get("g6e.48xlarge").efa_interfaces == 4
    assert catalog.get("p6-b200.48xlarge").env["NCCL_SOCKET_IFNAME"] == "^docker,lo,veth"
    assert catalog.family_generation("p6-b300") == "blackwell"


def test_trainium_is_not_nvidia_and_has_no_gpu_generation() -> None:
    trn2 = ic.default().get("trn2.48xlarge")
    assert (trn2.nvidia, trn2.gpu_count, trn2.accelerator_count, trn2.efa_interfaces) == (False, 0, 16, 16)
    assert ic.default().family_generation("trn2") is None


def test_lab_and_local_belong_to_no_family() -> None:
    lab, local = ic.default().get("lab"), ic.default().get("local")
    assert (lab.family, lab.gpu_count, lab.health["mounts"]) == (None, 0, ["/shared"])
    assert (local.family, local.gpu_count, local.efa_interfaces) == (None, None, 0)


def test_local_takes_given_gpu_facts_and_checks_them() -> None:
    given = {"gpu_count": 1, "gpu_model": "H200", "gpu_memory_mib": 144384, "gpu_generation": "hopper"}
    box = ic.default().get("local", {**given, "gpu_arch": "sm_90"})
    assert (box.gpu_count, box.gpu_model) == (1, "H200")
    assert box.health_expectations()["gpu_count"] == 1 and box.health_expectations()["mounts"] == []
    with pytest.raises(ic.CatalogError, match=r"given facts for local\.gpu_colour is not a known key"):
        ic.default().get("local", {"gpu_colour": "green"})
    with pytest.raises(ic.CatalogError, match=r"types\.local has GPUs but no gpu_model"):
        ic.default().get("local", {"gpu_count": 1})


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(ic.CatalogError, match=r"instance type 'p9\.huge' is not in the catalog; known: g4dn"):
        ic.default().get("p9.huge")
    assert ic.default().find("c5.large") is None
    assert ic.default().get("ml.p5.48xlarge").name == "p5.48xlarge"
    with pytest.raises(ic.CatalogError, match=r"instance family 'p9' is not in the catalog"):
        ic.default().family_facts("p9")


def test_every_stack_family_is_in_the_catalog(shipped_stacks) -> None:
    families = set(ic.default().families())
    for stack_id, stack in shipped_stacks.items():
        assert set(stack["scope"]["instance_families"]) <= families, stack_id


def test_stack_environment_agrees_with_the_catalog(shipped_stacks, rules) -> None:
    # The node profile (stack environment) and the launch environment (catalog) must not contradict.
    catalog = ic.default()
    for stack_id, stack in shipped_stacks.items():
        for family in stack["scope"]["instance_families"]:
            env = sm.environment(stack, rules, stack["scope"]["os"][0], "x86_64", family)
            for name in catalog.names():
                entry = catalog.get(name)
                if entry.family != family:
                    continue
                clash = {k: (v, entry.env[k]) for k, v in env.items() if k in entry.env and entry.env[k] != v}
                assert clash == {}, f"{stack_id} {name}: stack vs catalog {clash}"


# ------------------------------------------------------------------------------------- bad catalogs, named
def test_bad_type_value_is_named_with_its_key(data: dict) -> None:
    data["types"]["p5.48xlarge"]["gpu_count"] = "eight"
    refused(data, r"types\.p5\.48xlarge\.gpu_count must be an integer >= 0")


def test_boolean_is_not_a_count(data: dict) -> None:
    data["types"]["g5.48xlarge"]["efa_interfaces"] = True
    refused(data, r"types\.g5\.48xlarge\.efa_interfaces must be an integer >= 0 \(got True\)")


def test_negative_and_zero_values_are_refused(data: dict) -> None:
    bad = copy.deepcopy(data)
    bad["types"]["p4d.24xlarge"]["efa_interfaces"] = -1
    refused(bad, r"types\.p4d\.24xlarge\.efa_interfaces must be an integer >= 0")
    data["types"]["p4d.24xlarge"]["nccl_allreduce_busbw_gbps"] = 0
    refused(data, r"types\.p4d\.24xlarge\.nccl_allreduce_busbw_gbps must be a number > 0 or null")


def test_unknown_key_is_named(data: dict) -> None:
    data["types"]["p5.48xlarge"]["gpus"] = 8
    refused(data, r"types\.p5\.48xlarge\.gpus is not a known key")


def test_bad_family_values_are_named(data: dict) -> None:
    bad = copy.deepcopy(data)
    bad["families"]["p5"]["gpu_generation"] = "hoppper"
    refused(bad, r"families\.p5\.gpu_generation must be one of kepler, .*blackwell or null")
    bad = copy.deepcopy(data)
    bad["families"]["p5"]["gpu_arch"] = "90"
    refused(bad, r"families\.p5\.gpu_arch must be an sm_NN string")
    bad = copy.deepcopy(data)
    del bad["families"]["g6"]["sources"]
    refused(bad, r"families\.g6\.sources must list https:// addresses")


def test_env_must_hold_strings(data: dict) -> None:
    data["families"]["p5"]["env"]["NCCL_BUFFSIZE"] = 8388608
    refused(data, r"families\.p5\.env must be a mapping of variable names to strings")


def test_unknown_health_key_is_named(data: dict) -> None:
    data["types"]["lab"]["health"]["mount"] = ["/shared"]
    refused(data, r"types\.lab\.health must be a mapping with keys among")


def test_type_without_family_entry_is_refused(data: dict) -> None:
    data["types"]["p7.48xlarge"] = {"gpu_count": 8}
    refused(data, r"types\.p7\.48xlarge needs families\.p7")


def test_cross_key_rules_are_checked_on_the_merged_entry(data: dict) -> None:
    bad = copy.deepcopy(data)
    bad["types"]["trn2.48xlarge"]["gpu_count"] = 16
    refused(bad, r"types\.trn2\.48xlarge\.gpu_count must be 0 when nvidia is false")
    bad = copy.deepcopy(data)
    bad["types"]["p5.48xlarge"]["min_memory_gib"] = 4096
    refused(bad, r"types\.p5\.48xlarge\.min_memory_gib must be at most host_memory_gib")


def test_document_shape_is_checked(data: dict) -> None:
    refused({**data, "schema": 2}, r"schema must be 1")
    refused({**data, "types": []}, r"'types' must be a mapping")
    defaults = dict(data["defaults"])
    del defaults["env"]
    refused({**data, "defaults": defaults}, r"defaults lacks env")


def test_a_yaml_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "instance_types.yml"
    path.write_text("types: [unclosed\n", encoding="utf-8")
    with pytest.raises(ic.CatalogError, match=r"instance catalog .*instance_types\.yml: not YAML"):
        ic.load_file(str(path))


def test_vcpus_are_ec2_s_default_vcpus() -> None:
    """The quota check counts these; each type moto's copy of EC2's DescribeInstanceTypes data holds must
    agree with it, and a type it lacks must follow EC2's sizes (an xlarge is 4 vCPUs)."""
    import gzip
    import json

    import moto

    data = Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"
    ec2 = json.loads(gzip.decompress(data.read_bytes()))
    catalog = ic.default()
    for name in (n for n in catalog.names() if "." in n):
        vcpus = catalog.get(name).vcpus
        if name in ec2:
            assert vcpus == ec2[name]["VCpuInfo"]["DefaultVCpus"], name
        else:
            assert vcpus == 4 * int(name.split(".")[1].removesuffix("xlarge")), name
    assert catalog.get("lab").vcpus is None and catalog.get("local").vcpus is None


def test_vcpus_must_be_a_positive_integer() -> None:
    bad = copy.deepcopy(yaml.safe_load(SOURCE.read_text()))
    bad["types"]["p5.48xlarge"]["vcpus"] = 0
    with pytest.raises(ic.CatalogError, match=r"types.p5.48xlarge.vcpus must be an integer > 0"):
        ic.validate(bad)
