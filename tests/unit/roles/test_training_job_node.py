"""What training_job tells its plan about the nodes (validate.yml, "Describe the nodes for the plan"): the
launch host's OS and architecture, the environments its image.json lists, and training_job_python's torch
(None when it was not read, '' when it does not import). Rendered by Ansible's templar from the task itself,
with the registered results the tasks before it leave."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible_collections.trainstack.cluster.plugins.module_utils.launch import plan

from tests.support import OS_FACTS, REPO

VALIDATE = REPO / "roles" / "training_job" / "tasks" / "validate.yml"


def facts(name: str) -> dict[str, Any]:
    distribution, version, major, family, arch = OS_FACTS[name]
    return {
        "distribution": distribution,
        "distribution_version": version,
        "distribution_major_version": major,
        "os_family": family,
        "architecture": arch,
    }


def described(**variables: Any) -> dict[str, Any]:
    tasks = DataLoader().load_from_file(str(VALIDATE), trusted_as_template=True)
    task = next(t for t in tasks if t["name"] == "Describe the nodes for the plan")
    templar = Templar(loader=DataLoader(), variables={"ansible_facts": {}, **variables})
    return templar.template(task["ansible.builtin.set_fact"]["__training_job_node"])


def host(envs: list[dict[str, str]]) -> dict[str, Any]:
    """launch_host_facts' result for an image whose record lists ``envs``."""
    return {"changed": False, "image_record_found": True, "testcase_envs": envs}


def test_the_launch_hosts_os_and_baked_environments_are_passed() -> None:
    envs = [{"case": "pytorch/ddp", "key": "0123456789abcdef", "path": "/opt/trainstack/envs/ddp"}]
    node = described(ansible_facts=facts("al2023"), __training_job_host=host(envs))
    assert (node["arch"], node["envs"], node["torch"]) == ("x86_64", envs, None)
    assert plan.facts_os(node["facts"]) == "amzn-2023"


def test_without_facts_or_image_json_nothing_is_claimed() -> None:
    node = described(__training_job_host={"skipped": True})
    assert (node["arch"], node["envs"], node["torch"], plan.facts_os(node["facts"])) == ("", [], None, "")


def test_an_os_no_stack_knows_is_unknown_not_an_error() -> None:
    """A local launch from a workstation of another OS plans like one without facts (the lab's lock)."""
    node = described(ansible_facts={**facts("debian12"), "distribution": "MacOSX"})
    assert plan.facts_os(node["facts"]) == ""


@pytest.mark.parametrize(
    ("probe", "torch"),
    [
        ({"rc": 0, "stdout": "2.12.0+cu128\n"}, "2.12.0+cu128"),
        ({"rc": 1, "stdout": "", "stderr": "ModuleNotFoundError: No module named 'torch'"}, ""),
        ({"rc": 3, "stdout": ""}, None),
        ({"skipped": True}, None),
    ],
)
def test_the_torch_of_the_interpreter_is_passed_as_read(probe: dict[str, Any], torch: str | None) -> None:
    assert described(ansible_facts=facts("debian12"), __training_job_torch_probe=probe)["torch"] == torch
