"""roles/pytorch on every OS it supports: the interpreter each OS vars file names must have a torch wheel in
the stack for every architecture in scope, since the role installs exactly the wheel of that Python tag.

Only Debian 12 runs in the lab; these checks are what keeps the Ubuntu and Amazon Linux paths honest.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from plugins.module_utils.stack.stack_matrix import resolve
from tests.support import REPO

VARS = REPO / "roles" / "pytorch" / "vars"
STACKS = sorted((REPO / "stacks").glob("ts-*.yml"))

# What each OS ships: the Python the role's vars must build the virtualenv from (distribution facts).
OS_PYTHON = {
    "debian-12": "cp311",
    "ubuntu-22.04": "cp310",
    "ubuntu-24.04": "cp312",
    # AL2023's python3 is 3.9, older than torch supports: the role takes the packaged python3.11.
    "amazon-2023": "cp311",
}
STACK_OS_ID = {"amazon-2023": "amzn-2023"}


def os_vars(name: str) -> dict:
    return yaml.safe_load((VARS / f"{name}.yml").read_text())


@pytest.mark.parametrize("name", sorted(OS_PYTHON))
def test_os_vars_name_the_distributions_python(name: str) -> None:
    values = os_vars(name)
    assert values["__pytorch_os_wheel_tag"] == OS_PYTHON[name]
    if name == "amazon-2023":
        assert values["__pytorch_os_python"] == "/usr/bin/python3.11"
        assert "python3.11" in values["__pytorch_os_packages"]
    else:
        assert values["__pytorch_os_python"] == "/usr/bin/python3"
        assert "python3-venv" in values["__pytorch_os_packages"]


def test_every_os_has_a_vars_file() -> None:
    assert sorted(p.stem for p in VARS.glob("*-*.yml")) == sorted(OS_PYTHON)


@pytest.mark.parametrize("stack_path", STACKS, ids=[p.stem for p in STACKS])
@pytest.mark.parametrize("name", sorted(OS_PYTHON))
def test_stack_has_one_wheel_per_os_tag_and_arch(stack_path: Path, name: str) -> None:
    """The current stack must serve every OS/arch in scope; an older stack may lack some, never hold two."""
    stack = yaml.safe_load(stack_path.read_text())
    os_id = STACK_OS_ID.get(name, name)
    tag = os_vars(name)["__pytorch_os_wheel_tag"]
    # The lab (debian-12) is x86_64 only: its CPU wheel is the lab's.
    arches = ["x86_64"] if name == "debian-12" else stack["scope"]["arch"]
    for arch in arches:
        pytorch = resolve(stack, os_id, arch).get("pytorch", {})
        wheels = [a for a in pytorch.get("artifacts", []) if f"-{tag}-" in a["url"]]
        assert len(wheels) <= 1, (os_id, arch, wheels)
        if stack["status"] == "current":
            assert len(wheels) == 1, f"{stack['id']}: no torch {tag} wheel for {os_id}/{arch}"
            wheel = wheels[0]
            assert wheel["url"].endswith(f"_{arch}.whl") and len(wheel["sha256"] or "") == 64
            assert f"torch-{pytorch['version']}" in wheel["url"].replace("%2B", "+")
            assert ("%2Bcpu" in wheel["url"]) == (pytorch.get("variant") == "cpu")


def test_current_stack_pins_what_the_test_cases_need_beside_torch(current_stack_id: str) -> None:
    """The image's virtualenv runs the catalog's PyTorch test cases as they are (make demo does): its torch
    and extra packages must be the versions the test cases' manifests require."""
    stack = yaml.safe_load((REPO / "stacks" / f"{current_stack_id}.yml").read_text())["components"]["pytorch"]
    image = {f"torch=={stack['version']}", *stack["extra_packages"]}
    for manifest in sorted((REPO / "testcases" / "pytorch").glob("*/testcase.yml")):
        required = set(yaml.safe_load(manifest.read_text())["requirements"])
        assert required <= image, f"{manifest.parent.name} needs {sorted(required - image)}"
