"""Tests are selected by component and role with pytest markers (make test-<component> runs `pytest -m`).

The markers come from where a test file is and what it is named (tests/support/markers.py:
markers_for_test_file), so a new role's tests are picked up without a make file listing them; these checks
keep that mapping whole.
"""

from __future__ import annotations

import pytest

from tests.support import COMPONENT_ROLES, REPO, ROLE_COMPONENT, markers_for_test_file, role_of_test_file

ROLES_DIR = REPO / "tests" / "unit" / "roles"
# Files under tests/unit/roles about several roles or about all of them; each names its markers itself or
# belongs to no single component.
CROSS_ROLE_FILES = {
    "test_entry_points.py",
    "test_role_interfaces.py",
    "test_nvidia_verify.py",
}


def test_every_role_is_in_exactly_one_component() -> None:
    roles = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())
    listed = sorted(role for members in COMPONENT_ROLES.values() for role in members)
    assert listed == sorted(set(listed)), "a role is in two components"
    assert listed == roles, "tests/support/markers.py COMPONENT_ROLES and roles/ differ"


def test_every_role_test_file_is_named_for_its_role() -> None:
    unnamed = [p.name for p in ROLES_DIR.glob("test_*.py") if role_of_test_file(p) is None]
    assert sorted(unnamed) == sorted(CROSS_ROLE_FILES)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("unit/roles/test_nccl.py", ["nvidia", "role_nccl"]),
        ("unit/roles/test_nccl_tests.py", ["fabric", "role_nccl_tests"]),
        ("unit/roles/test_nvme_scratch_plan.py", ["fabric", "role_nvme_scratch"]),
        ("unit/roles/test_training_job_nsys.py", ["launch", "role_training_job"]),
        ("unit/roles/test_entry_points.py", []),
        ("unit/validation/test_monitoring.py", ["validation"]),
        ("unit/plugins/inventory/test_x.py", ["inventory"]),
        ("unit/plugins/filter/test_x.py", []),
        ("integration/fabric/test_mirror.py", ["fabric"]),
        ("integration/inventory/test_x.py", ["inventory"]),
    ],
)
def test_a_file_gets_its_components_and_roles_markers(path: str, expected: list[str]) -> None:
    assert markers_for_test_file(REPO / "tests" / path) == expected


def test_role_markers_are_declared(pytestconfig: pytest.Config) -> None:
    declared = {line.split(":")[0] for line in pytestconfig.getini("markers")}
    assert {f"role_{role}" for role in ROLE_COMPONENT} <= declared
    assert set(COMPONENT_ROLES) | {"inventory", "stacks", "testcases"} <= declared
