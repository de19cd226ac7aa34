"""The stack as a CUDA container's layers read it (module_utils/image/container_stack, filter
container_stack): the shipped stacks resolved for Debian 12 through the same resolver every role uses,
before and after, and the refusals of a stack whose NCCL line disagrees or that does not scope the
container's OS."""

from __future__ import annotations

import copy

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.trainstack.cluster.plugins.filter import container as container_filter
from ansible_collections.trainstack.cluster.plugins.filter import launch as launch_filter
from ansible_collections.trainstack.cluster.plugins.module_utils.image import container_stack as cs
from ansible_collections.trainstack.cluster.plugins.module_utils.stack import stack_matrix as sm

from tests.support import CURRENT_STACK_ID, REPO

STACK = yaml.safe_load((REPO / "stacks" / f"{CURRENT_STACK_ID}.yml").read_text())
GPU_LINE = ["cuda", "aws_ofi_nccl", "nccl_tests", "pytorch"]


def test_debian_12_is_the_labs_os_with_torchs_cpu_build_and_no_gpu_line() -> None:
    """What the container starts from: the shipped stack gives Debian 12 the lab's choices."""
    pins = sm.resolve(STACK, "debian-12", "x86_64")
    assert pins["pytorch"]["variant"] == "cpu"
    assert not {"cuda", "aws_ofi_nccl", "nccl_tests"} & set(pins)


def test_the_container_reads_the_gpu_line_on_debian_12() -> None:
    widened = cs.container_stack(STACK, "debian-12", GPU_LINE)
    pins = sm.resolve(widened, "debian-12", "x86_64")
    assert pins["pytorch"].get("variant", "cuda") == "cuda"
    assert pins["pytorch"]["cuda_runtime"] == STACK["components"]["pytorch"]["cuda_runtime"]
    assert pins["pytorch"]["nccl_pin"] == pins["nccl"]["version"] == STACK["components"]["nccl"]["version"]
    assert any("-cp311-cp311-manylinux" in a["url"] for a in pins["pytorch"]["artifacts"])
    for name in ("cuda", "aws_ofi_nccl", "nccl_tests"):
        assert pins[name]["version"] == STACK["components"][name]["version"], name
    assert "debian-12" not in widened["scope"]["lab_os"]
    # Only what was named: the EFA installer is still not pinned on Debian 12.
    assert "efa_installer" not in pins


def test_the_input_stack_is_not_changed() -> None:
    before = copy.deepcopy(STACK)
    cs.container_stack(STACK, "debian-12", GPU_LINE)
    assert before == STACK


def test_its_test_case_environments_come_from_the_gpu_locks() -> None:
    """The pytorch role's filter, given the container's stack, bakes gpu-debian-12-x86_64 (the lab's lock
    on the shipped stack), keyed with Debian 12's python3."""
    catalog = str(REPO / "testcases")
    lab = launch_filter.testcase_envs(
        catalog, ["pytorch/fsdp"], "debian-12", "x86_64", STACK, "/usr/bin/python3"
    )
    assert lab["target"] == "lab"
    widened = cs.container_stack(STACK, "debian-12", GPU_LINE)
    gpu = launch_filter.testcase_envs(
        catalog, ["pytorch/fsdp"], "debian-12", "x86_64", widened, "/usr/bin/python3"
    )
    assert gpu["target"] == "gpu-debian-12-x86_64"
    assert [e["lock_name"] for e in gpu["bake"]] == ["requirements.gpu-debian-12-x86_64.lock"]
    assert gpu["bake"][0]["torch"] == STACK["components"]["pytorch"]["version"]


def broken(**changes: dict) -> dict:
    stack = copy.deepcopy(STACK)
    for name, fields in changes.items():
        stack["components"][name].update(fields)
    return stack


@pytest.mark.parametrize(
    ("stack", "message"),
    [
        (
            broken(pytorch={"nccl_pin": "2.28.3"}),
            "components.pytorch.nccl_pin is 2.28.3 but components.nccl.version",
        ),
        (broken(nccl={"cuda_major": 12}), "components.nccl.cuda_major is 12"),
        (broken(pytorch={"cuda_runtime": None}), "must name torch's CUDA line"),
    ],
    ids=["nccl pin", "cuda major", "no cuda line"],
)
def test_a_stack_whose_nccl_line_disagrees_is_refused(stack: dict, message: str) -> None:
    with pytest.raises(cs.ContainerStackError, match=message):
        cs.container_stack(stack, "debian-12", GPU_LINE)
    with pytest.raises(AnsibleFilterError, match="container_stack: stack"):
        container_filter.container_stack(stack, "debian-12", GPU_LINE)


def test_an_os_outside_the_scope_or_an_unknown_component_is_refused() -> None:
    with pytest.raises(cs.ContainerStackError, match=r"scope\.os .* has no rhel-9"):
        cs.container_stack(STACK, "rhel-9", GPU_LINE)
    with pytest.raises(cs.ContainerStackError, match="has no component tensorrt"):
        cs.container_stack(STACK, "debian-12", [*GPU_LINE, "tensorrt"])
    with pytest.raises(AnsibleFilterError, match="must be a stack document"):
        container_filter.container_stack(CURRENT_STACK_ID, "debian-12", GPU_LINE)


def test_the_shipped_stacks_nccl_lines_agree() -> None:
    assert cs.nccl_line_problems(STACK) == []
