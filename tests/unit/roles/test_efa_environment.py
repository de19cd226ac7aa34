"""The FI_*/NCCL_* job environment the efa role writes: stack_matrix.environment over stacks/rules.yml."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import REPO

if str(REPO / ".cache" / "collections") not in sys.path:
    sys.path.insert(0, str(REPO / ".cache" / "collections"))

from ansible_collections.trainstack.cluster.plugins.filter import stack as stack_filters
from ansible_collections.trainstack.cluster.plugins.module_utils.stack import stack_matrix as sm

STACKS = Path(REPO) / "stacks"


@pytest.fixture(scope="module")
def rules() -> list[dict]:
    return yaml.safe_load((STACKS / "rules.yml").read_text())["rules"]


@pytest.fixture
def stack(current_stack_id: str) -> dict:
    return copy.deepcopy(yaml.safe_load((STACKS / f"{current_stack_id}.yml").read_text()))


def test_generic_environment_is_the_stacks(stack, rules):
    env = sm.environment(stack, rules, "ubuntu-24.04", "x86_64")
    assert env == {str(k): str(v) for k, v in stack["environment"].items()}


def test_rdma_read_family_keeps_device_rdma(stack, rules):
    assert sm.environment(stack, rules, "ubuntu-24.04", "x86_64", "p5")["FI_EFA_USE_DEVICE_RDMA"] == "1"


@pytest.mark.parametrize("family", ["g5", "g6", "g6e", "g5g"])
def test_family_without_rdma_read_drops_device_rdma(stack, rules, family):
    env = sm.environment(stack, rules, "ubuntu-24.04", "x86_64", family)
    assert "FI_EFA_USE_DEVICE_RDMA" not in env
    assert env["FI_PROVIDER"] == "efa"


def test_old_efa_with_new_nccl_adds_sync_memops(stack, rules):
    stack["components"]["efa_installer"]["version"] = "1.28.0"
    env = sm.environment(stack, rules, "ubuntu-22.04", "x86_64")
    assert env["FI_EFA_SET_CUDA_SYNC_MEMOPS"] == "0"


def test_new_efa_needs_no_sync_memops(stack, rules):
    assert "FI_EFA_SET_CUDA_SYNC_MEMOPS" not in sm.environment(stack, rules, "ubuntu-22.04", "x86_64")


def test_old_efa_with_old_nccl_needs_no_sync_memops(stack, rules):
    stack["components"]["efa_installer"]["version"] = "1.28.0"
    stack["components"]["nccl"]["version"] = "2.18.5"
    assert "FI_EFA_SET_CUDA_SYNC_MEMOPS" not in sm.environment(stack, rules, "ubuntu-22.04", "x86_64")


def test_recommended_env_never_refuses_a_stack(stack, rules):
    report = sm.check(stack, rules)
    assert not [e for e in report.errors if e.rule == "efa-device-rdma-read"]


def test_unknown_rule_kind_is_refused(stack, rules):
    bad = [*rules, {"id": "x", "kind": "nope", "citation": "c"}]
    with pytest.raises(sm.StackError, match="unknown kind 'nope'"):
        sm.environment(stack, bad, "ubuntu-22.04", "x86_64")


def test_filter_matches_module(stack, rules):
    direct = sm.environment(stack, rules, "amzn-2023", "aarch64", "g5g")
    assert stack_filters.stack_environment(stack, rules, "amzn-2023", "aarch64", "g5g") == direct
    assert stack_filters.stack_environment(stack, rules, "amzn-2023", "aarch64", "") == sm.environment(
        stack, rules, "amzn-2023", "aarch64"
    )


def test_target_outside_scope_is_an_error(stack, rules):
    with pytest.raises(Exception, match="outside scope"):
        stack_filters.stack_environment(stack, rules, "rhel-9", "x86_64")
