"""The test case environments an image bakes (roles/pytorch tasks/testcases.yml), how image.json lists them
(roles/image_manifest) and how the self-check judges them (roles/image_selfcheck), rendered from the roles'
own tasks with Ansible's templar for each supported system; and that a launch on such an image computes the
same key and so uses the baked environment (module_utils/launch)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from ansible.template import trust_as_template
from ansible_collections.trainstack.cluster.plugins.filter.launch import testcase_env_check as env_check
from ansible_collections.trainstack.cluster.plugins.module_utils.launch import locks, plan

from tests.support import REPO, role_data_templar, role_task, role_templar

CATALOG = str(REPO / "testcases")
ALL = locks.catalog_testcases(CATALOG)


def baked(os_key: str, **variables: Any) -> dict[str, Any]:
    templar = role_templar("pytorch", os_key, variables)
    task = role_task("pytorch", "testcases.yml", "Choose the test case environments to bake")
    return templar.template(trust_as_template(task["ansible.builtin.set_fact"]["__pytorch_testcase_envs"]))


def test_a_gpu_image_bakes_every_case_the_index_can_install_from_its_gpu_lock() -> None:
    """Without a wheelhouse, the one case whose lock pins a wheel built from source is skipped, and says so:
    pip would download DeepSpeed's source from the index and refuse it by the lock's hash."""
    envs = baked("ubuntu2404")
    assert envs["target"] == "gpu-ubuntu-24.04-x86_64"
    (skipped,) = envs["skipped"]
    assert skipped["case"] == "deepspeed/zero3"
    assert skipped["reason"].startswith("deepspeed==0.19.8 is built from source into a wheelhouse")
    assert [env["case"] for env in envs["bake"]] == [case for case in ALL if case != "deepspeed/zero3"]
    assert {env["lock_name"] for env in envs["bake"]} == {"requirements.gpu-ubuntu-24.04-x86_64.lock"}
    assert all(
        env["path"] == f"/opt/trainstack/envs/{env['case'].replace('/', '-')}-{env['key']}"
        for env in envs["bake"]
    )


def test_a_launch_on_the_image_finds_the_baked_environment() -> None:
    """The key the bake writes is the one the launch computes for the nodes of that image."""
    envs = baked("ubuntu2404arm", pytorch_testcases=["pytorch/fsdp"])
    (fsdp,) = envs["bake"]
    request = {
        **plan_request("pytorch/fsdp"),
        "training_job_instance_type": "p6e-gb200.36xlarge",
        "training_job_python": fsdp["python"],
    }
    node = {"os": "ubuntu-24.04", "arch": "aarch64", "envs": [fsdp]}
    instance = {"gpu_count": 4, "arch": "aarch64"}
    the_plan = plan.launch_plan(request, {}, CATALOG, instance, None, "", node)
    assert the_plan["venv"] == f"baked {fsdp['path']}"
    assert the_plan["target"] == fsdp["target"] == "gpu-ubuntu-24.04-aarch64"


def plan_request(testcase: str) -> dict[str, Any]:
    defaults = yaml.safe_load((REPO / "roles" / "training_job" / "defaults" / "main.yml").read_text())
    return {
        **defaults,
        "training_job_testcase": testcase,
        "training_job_shared_dir": "/fsx",
        "training_job_name": "x",
    }


def test_amazon_linux_bakes_with_its_python_3_11() -> None:
    envs = baked("al2023", pytorch_testcases="pytorch/ddp, nccl/collectives")
    assert [env["case"] for env in envs["bake"]] == ["pytorch/ddp", "nccl/collectives"]
    assert {env["python"] for env in envs["bake"]} == {"/usr/bin/python3.11"}
    lock = (REPO / "testcases" / "pytorch" / "ddp" / "requirements.gpu-amzn-2023-x86_64.lock").read_text()
    assert envs["bake"][0]["key"] == locks.venv_key(lock, "/usr/bin/python3.11")


def test_ubuntu_22_04_skips_the_cases_it_has_no_lock_for_and_says_why() -> None:
    envs = baked("ubuntu2204", pytorch_testcases=["pytorch/fsdp", "pytorch/ddp"])
    assert [env["case"] for env in envs["bake"]] == ["pytorch/ddp"]
    (skipped,) = envs["skipped"]
    assert skipped["case"] == "pytorch/fsdp" and "numpy==2.4.6" in skipped["reason"]


def test_the_lab_image_bakes_the_lab_locks_its_wheelhouse_holds(tmp_path) -> None:
    for name in ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "numpy-2.4.6-cp311-cp311-x.whl"):
        (tmp_path / name).write_bytes(b"")
    lab_lock = (REPO / "testcases" / "pytorch" / "fsdp" / "requirements.lock").read_text()
    for line in lab_lock.splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split()[0].split("==")
            if name not in ("torch", "numpy"):
                (tmp_path / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(b"")
    envs = baked(
        "debian12", pytorch_testcases=["pytorch/fsdp", "torchtitan/llama"], pytorch_wheelhouse=str(tmp_path)
    )
    assert envs["target"] == "lab"
    assert [(env["case"], env["lock_name"]) for env in envs["bake"]] == [
        ("pytorch/fsdp", "requirements.lock")
    ]
    assert [s["case"] for s in envs["skipped"]] == ["torchtitan/llama"]
    assert "the wheelhouse holds no file of" in envs["skipped"][0]["reason"]


def test_a_wheelhouse_that_holds_the_built_wheel_bakes_the_source_only_case(tmp_path) -> None:
    case = REPO / "testcases" / "deepspeed" / "zero3"
    lock = (case / "requirements.gpu-ubuntu-24.04-x86_64.lock").read_text()
    for name, version in locks.LOCK_LINE.findall(lock):
        (tmp_path / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(b"")
    envs = baked("ubuntu2404", pytorch_testcases=["deepspeed/zero3"], pytorch_wheelhouse=str(tmp_path))
    assert [env["case"] for env in envs["bake"]] == ["deepspeed/zero3"] and envs["skipped"] == []


def test_the_lab_lock_of_deepspeed_says_its_wheel_is_built_from_source() -> None:
    lock = (REPO / "testcases" / "deepspeed" / "zero3" / "requirements.lock").read_text()
    assert locks.source_only_pins(lock) == ["deepspeed==0.19.8"]
    fsdp = (REPO / "testcases" / "pytorch" / "fsdp" / "requirements.lock").read_text()
    assert locks.source_only_pins(fsdp) == []


def test_without_a_wheelhouse_the_locks_find_the_stacks_torch_wheel_beside_the_index() -> None:
    """The lab lock's torch is a local version (+cpu) that no index serves: the stack's checksummed wheel,
    fetched by the artifact layer, is offered with --find-links, the index still on for the rest."""
    templar = role_templar("pytorch", "debian12", {"pytorch_wheelhouse": ""})
    block = role_task("pytorch", "testcases.yml", "Bake the environments that are not complete")["block"]
    names = [task["name"] for task in block]
    assert names.index("Fetch the stack's torch wheel for the environments") < names.index(
        "Install each environment's lock"
    )
    install = block[names.index("Install each environment's lock")]
    item = {"path": "/opt/trainstack/envs/pytorch-ddp-0123456789abcdef", "lock_name": "requirements.lock"}
    fetched = {"results": [{"dest": "/var/cache/trainstack/artifacts/torch-cpu-cp311-x86_64/torch.whl"}]}
    scoped = templar.copy_with_new_env(
        available_variables={**templar.available_variables, "item": item, "artifact_results": fetched}
    )
    argv = scoped.template(trust_as_template(install["ansible.builtin.command"]["argv"]))
    assert "--no-index" not in argv
    assert argv[argv.index("--find-links") + 1] == "/var/cache/trainstack/artifacts/torch-cpu-cp311-x86_64"


def test_none_are_baked_when_the_list_is_empty() -> None:
    assert baked("ubuntu2404", pytorch_testcases="")["bake"] == []
    assert baked("ubuntu2404", pytorch_testcases=[])["bake"] == []


def test_an_unknown_case_fails_the_build() -> None:
    with pytest.raises(Exception, match=r"unknown test case\(s\) pytorch/nope"):
        baked("ubuntu2404", pytorch_testcases=["pytorch/nope"])


def test_the_install_uses_the_lock_with_hashes_and_the_wheelhouse_offline() -> None:
    templar = role_templar("pytorch", "debian12", {"pytorch_wheelhouse": "/wheels"})
    block = role_task("pytorch", "testcases.yml", "Bake the environments that are not complete")["block"]
    install = next(task for task in block if task["name"] == "Install each environment's lock")
    item = {"path": "/opt/trainstack/envs/pytorch-ddp-0123456789abcdef", "lock_name": "requirements.lock"}
    scoped = templar.copy_with_new_env(available_variables={**templar.available_variables, "item": item})
    argv = scoped.template(trust_as_template(install["ansible.builtin.command"]["argv"]))
    assert argv[0] == f"{item['path']}/bin/pip" and "--require-hashes" in argv
    assert (
        argv[argv.index("--find-links") + 1] == "/var/cache/trainstack/pytorch-wheels"
        and "--no-index" in argv
    )
    assert argv[-2:] == ["-r", f"{item['path']}/requirements.lock"]


def test_image_json_lists_the_complete_environments_and_the_skipped() -> None:
    templar = role_data_templar(
        "image_manifest",
        __image_manifest_envs_slurp={},
        __image_manifest_env_stats={
            "results": [
                {"item": {"case": "pytorch/ddp", "key": "a" * 16}, "stat": {"exists": True}},
                {"item": {"case": "pytorch/fsdp", "key": "b" * 16}, "stat": {"exists": False}},
            ]
        },
    )
    task = role_task("image_manifest", "main.yml", "Assemble the manifest")
    body = task["ansible.builtin.set_fact"]["__image_manifest_body"]
    assert templar.template(trust_as_template(body["testcase_envs"])) == [
        {"case": "pytorch/ddp", "key": "a" * 16}
    ]
    assert templar.template(trust_as_template(body["testcase_envs_skipped"])) == []


@pytest.mark.parametrize(
    ("probe", "status"),
    [
        ({"rc": 0, "stdout": "2.13.0+cu130\n"}, "pass"),
        ({"rc": 0, "stdout": "2.12.0+cu128\n"}, "fail"),
        (
            {"rc": 1, "stdout": "", "stderr": "Traceback\nModuleNotFoundError: No module named 'torch'"},
            "fail",
        ),
    ],
)
def test_the_self_check_runs_each_environment_and_compares_its_torch(
    probe: dict[str, Any], status: str
) -> None:
    env = {"case": "pytorch/fsdp", "path": "/opt/trainstack/envs/pytorch-fsdp-x", "torch": "2.13.0"}
    check = env_check({**probe, "item": env})
    assert (check["check"], check["status"]) == ("testcase-env:pytorch/fsdp", status)
