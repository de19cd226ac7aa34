"""stack_image_roles: which roles an image build applies; a role that cannot be applied stops the build."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.trainstack.cluster.plugins.filter.stack import stack_image_roles

from tests.support import REPO

TASK_FILES = [str(p) for p in (REPO / "roles").glob("*/tasks/*.yml")]
PINNED = {"cuda": "13.2", "nccl": "2.29.7"}


def test_pinned_roles_apply_and_unpinned_ones_are_skipped_with_the_reason() -> None:
    plan = stack_image_roles(
        [
            {"role": "base", "components": []},
            {"role": "cuda", "components": ["cuda"]},
            {"role": "nvidia_driver", "components": ["nvidia_driver"]},
        ],
        TASK_FILES,
        PINNED,
    )
    assert [e["role"] for e in plan["apply"]] == ["base", "cuda"]
    assert plan["skipped"] == [
        {
            "role": "nvidia_driver",
            "components": ["nvidia_driver"],
            "reason": "stack pins no nvidia_driver for this OS/arch",
        }
    ]


def test_a_misspelt_role_is_an_error_naming_it() -> None:
    with pytest.raises(AnsibleFilterError, match="role nvidia_drivr is not a role of this collection"):
        stack_image_roles([{"role": "nvidia_drivr", "components": []}], TASK_FILES, PINNED)


def test_a_role_without_install_entry_point_is_an_error() -> None:
    with pytest.raises(
        AnsibleFilterError, match=r"role lab has no install entry point \(roles/lab/tasks/install.yml\)"
    ):
        stack_image_roles([{"role": "lab", "components": []}], TASK_FILES, PINNED)


def test_an_entry_with_another_key_is_an_error_naming_it() -> None:
    with pytest.raises(AnsibleFilterError, match="role slurm: unknown key tasks_from"):
        stack_image_roles([{"role": "slurm", "tasks_from": "main", "components": []}], TASK_FILES, PINNED)
