"""Which lock a node takes, and the virtualenv key shared by the launch and the image build
(module_utils/launch/locks.py)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.launch import locks, plan

from tests.support import REPO
from tests.unit.testcases.test_locks import script

CATALOG = str(REPO / "testcases")
ROLE = REPO / "roles" / "training_job"


def request(testcase: str, **overrides: Any) -> dict[str, Any]:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values = {**defaults, "training_job_testcase": testcase, "training_job_shared_dir": "/fsx"}
    values |= {"training_job_results_dir": "/results", "training_job_pip_env": {}, "training_job_name": "x"}
    return values | overrides


def test_the_script_names_locks_by_the_launch_rule() -> None:
    """scripts/testcase_lock.py writes the files the launch reads: one rule, imported, not copied."""
    testcase_lock = script("testcase_lock")
    assert testcase_lock.lock_name is locks.lock_name
    assert testcase_lock.gpu_target is locks.gpu_target
    names = {t.name for t in testcase_lock.gpu_targets(testcase_lock.current_stack())}
    assert locks.gpu_target("ubuntu-24.04", "aarch64") in names


def test_a_node_without_gpus_takes_the_lab_lock_whatever_its_os() -> None:
    assert locks.node_target(0, "ubuntu-24.04", "aarch64") == "lab"
    assert locks.node_target(8, "ubuntu-24.04", "x86_64") == "gpu-ubuntu-24.04-x86_64"
    assert locks.lock_name(locks.node_target(0, "", "")) == "requirements.lock"
    assert locks.lock_name("gpu-amzn-2023-aarch64") == "requirements.gpu-amzn-2023-aarch64.lock"


def test_the_key_is_the_lock_text_and_the_interpreter() -> None:
    lock = (REPO / "testcases" / "pytorch" / "ddp" / "requirements.lock").read_text()
    expected = hashlib.sha256((lock + "/usr/bin/python3").encode()).hexdigest()[:16]
    assert locks.venv_key(lock, "/usr/bin/python3") == expected
    assert locks.venv_key(lock, "/usr/bin/python3.11") != expected


def test_the_torch_of_a_lock_is_its_public_version() -> None:
    lab = (REPO / "testcases" / "pytorch" / "fsdp" / "requirements.lock").read_text()
    gpu = (REPO / "testcases" / "pytorch" / "fsdp" / "requirements.gpu-ubuntu-24.04-x86_64.lock").read_text()
    assert locks.torch_version(lab) == locks.torch_version(gpu) == "2.13.0"
    assert locks.torch_version("numpy==2.4.6 \\\n") == ""
    assert locks.public_version("2.13.0+cu130") == "2.13.0"


def test_an_image_bakes_what_a_launch_on_it_finds() -> None:
    """The build's key and path for a case are the ones the plan computes for a launch on that image."""
    baked = locks.baked_envs(
        CATALOG, ["pytorch/ddp", "pytorch/fsdp"], "gpu-ubuntu-24.04-x86_64", "/usr/bin/python3"
    )
    assert [env["case"] for env in baked["bake"]] == ["pytorch/ddp", "pytorch/fsdp"] and baked[
        "skipped"
    ] == []
    node = {"os": "ubuntu-24.04", "arch": "x86_64", "envs": baked["bake"]}
    req = request("pytorch/fsdp", training_job_instance_type="p5.48xlarge")
    the_plan = plan.launch_plan(req, {}, CATALOG, {"gpu_count": 8, "arch": "x86_64"}, None, "", node)
    fsdp = baked["bake"][1]
    assert fsdp["path"] == f"/opt/trainstack/envs/pytorch-fsdp-{the_plan['venv_key']}"
    assert the_plan["venv"] == f"baked {fsdp['path']}"
    assert the_plan["python"] == f"{fsdp['path']}/bin/python" and not the_plan["builds_venv"]
    assert the_plan["lock_name"] == fsdp["lock_name"] == "requirements.gpu-ubuntu-24.04-x86_64.lock"


def test_a_case_without_a_lock_for_the_image_is_skipped_with_the_tables_reason() -> None:
    baked = locks.baked_envs(CATALOG, ["pytorch/fsdp", "nccl/collectives"], "gpu-ubuntu-22.04-x86_64", "/p")
    assert [env["case"] for env in baked["bake"]] == ["nccl/collectives"]
    (skipped,) = baked["skipped"]
    assert skipped["case"] == "pytorch/fsdp" and "Python is 3.10" in skipped["reason"]


def test_an_unknown_case_fails_the_bake_naming_the_catalog() -> None:
    with pytest.raises(
        ValueError,
        match=r"unknown test case\(s\) pytorch/nope; the catalog has data/prepare, deepspeed/zero3",
    ):
        locks.baked_envs(CATALOG, ["pytorch/nope"], "lab", "/usr/bin/python3")


def test_the_lab_image_bakes_the_lab_locks() -> None:
    assert locks.image_target("debian-12", "x86_64", ["debian-12"]) == "lab"
    assert locks.image_target("amzn-2023", "aarch64", ["debian-12"]) == "gpu-amzn-2023-aarch64"
