"""build_container.yml's flavour table: the CUDA flavours (pytorch-cuda and one per test case on it) read from
the playbook itself. Every flavour is built by an import of the layer playbook, in the table's order; every
test case flavour bakes a case that has a lock for the containers' GPU target; the CUDA layers keep their
downloads and source builds in the host's mounted caches; and the table's own rules refuse unknown keys, a
flavour without roles and bad GPU architectures, naming the variable.
"""

from __future__ import annotations

import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.launch import locks

from tests.support import REPO
from tests.unit.image.test_container_inputs import PLAYBOOK, failed_rules

PLAYS = yaml.safe_load(PLAYBOOK.read_text())
TABLE = PLAYS[0]["vars"]["container_image_flavours"]
MOUNTS = ["/" + m["target"] for m in PLAYS[0]["vars"]["__container_cache_mounts"]]
CATALOG = str(REPO / "testcases")
TARGET = "gpu-debian-12-x86_64"
CASE_FLAVOURS = {name: entry for name, entry in TABLE.items() if entry.get("testcases")}


def test_every_flavour_is_built_by_one_import_in_table_order() -> None:
    imported = [
        play["vars"]["container_layer"]
        for play in PLAYS
        if str(play.get("ansible.builtin.import_playbook", "")).endswith("container_layer.yml")
    ]
    assert imported == list(TABLE)


def test_pytorch_cuda_carries_the_stacks_gpu_line_on_base() -> None:
    entry = TABLE["pytorch-cuda"]
    assert entry["parent"] == "base" and entry["gpu"] is True
    assert [r["role"] for r in entry["roles"]] == ["cuda", "efa", "aws_ofi_nccl", "nccl_tests", "pytorch"]
    assert entry["vars"]["cuda_source"] == "wheels"
    # EFA's user space as an AMI gets it, with a container's installer switches (-y --skip-kmod
    # --skip-limit-conf --no-verify), and aws-ofi-nccl built against it with the AMI's platform.
    assert {k: v for k, v in entry["vars"].items() if k.startswith("efa_") and k != "efa_work_dir"} == {
        "efa_skip_kmod": True,
        "efa_manage_limits": True,
        "efa_installer_verify": False,
        # An ordinary task: a background job would outlive the `buildah run` of its task.
        "efa_installer_timeout": 0,
        "efa_bundled_plugin": False,
    }
    assert entry["vars"]["aws_ofi_nccl_libfabric_home"] == "/opt/amazon/efa"
    assert "aws_ofi_nccl_platform_aws" not in entry["vars"]
    assert entry["vars"]["pytorch_wheelhouse"] == ""
    # The layer hands the pytorch role its flavour's test cases: none here, one in each flavour on it.
    assert not entry.get("testcases")
    assert all("pytorch_testcases" not in e.get("vars", {}) for e in TABLE.values())


@pytest.mark.parametrize("flavour", sorted(CASE_FLAVOURS))
def test_a_test_case_flavour_bakes_a_case_with_a_container_lock(flavour: str) -> None:
    entry = CASE_FLAVOURS[flavour]
    assert entry["parent"] == "pytorch-cuda" and entry["gpu"] is True
    assert [r["role"] for r in entry["roles"]] == ["pytorch"]
    assert flavour == "cuda-" + locks.flat_name(entry["testcases"][0])
    envs = locks.baked_envs(CATALOG, entry["testcases"], TARGET, "/usr/bin/python3")
    assert envs["skipped"] == [] and [e["case"] for e in envs["bake"]] == entry["testcases"]
    # The parent holds /opt/trainstack/venv: linking to it would copy its files up into this layer.
    assert entry["vars"]["pytorch_testcases_link_venv"] is False


def test_every_catalog_case_has_a_flavour_but_the_source_built_one() -> None:
    """deepspeed/zero3's lock pins a wheel built from source: an install from the index cannot fetch it.
    data/prepare is a CPU job (tokenizing), which a CUDA image would only make larger."""
    flavoured = {case for entry in CASE_FLAVOURS.values() for case in entry["testcases"]}
    left = sorted(set(locks.catalog_testcases(CATALOG)) - flavoured)
    assert left == ["data/prepare", "deepspeed/zero3"]
    _path, lock = locks.read_lock(CATALOG, "deepspeed/zero3", TARGET)
    assert locks.source_only_pins(lock)


@pytest.mark.parametrize("flavour", ["pytorch-cuda", *sorted(CASE_FLAVOURS)])
def test_downloads_and_builds_stay_in_the_mounted_caches(flavour: str) -> None:
    suffixes = ("_build_dir", "_cache_dir", "_work_dir")
    places = {k: v for k, v in TABLE[flavour]["vars"].items() if k.endswith(suffixes)}
    assert places, flavour
    outside = {k: v for k, v in places.items() if not any(v.startswith(m + "/") for m in MOUNTS)}
    assert outside == {}


def test_a_valid_cuda_request_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (
        failed_rules(monkeypatch, container_flavours=["cuda-pytorch-fsdp"], container_cuda_archs=["sm_90"])
        == []
    )


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"container_cuda_archs": ["90"]}, "container_cuda_archs="),
        ({"container_cuda_archs": "sm_90"}, "container_cuda_archs="),
        (
            {"container_image_flavours": {**TABLE, "extra": {"parent": "base", "roles": [], "packages": []}}},
            "unknown keys are refused",
        ),
        (
            {"container_image_flavours": {**TABLE, "extra": {"parent": "base"}}},
            "every flavour names its roles",
        ),
    ],
    ids=["arch without sm_", "archs as a string", "unknown flavour key", "flavour without roles"],
)
def test_bad_cuda_inputs_are_refused(monkeypatch: pytest.MonkeyPatch, overrides: dict, expected: str) -> None:
    messages = failed_rules(monkeypatch, **overrides)
    assert any(expected in m for m in messages), messages
