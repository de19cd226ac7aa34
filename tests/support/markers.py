"""Test components: which ``make test-<component>`` selects a test file, from where it is and its name.

``make test-<component>`` selects its tests with ``pytest -m <component>``; tests/conftest.py marks each test
with what this module derives, so that a new test file needs no marker by hand.
"""

from __future__ import annotations

from pathlib import Path

from .collection import REPO

# Test components: `make test-<component>` selects its tests with `pytest -m <component>`. A role's tests are
# tests/unit/roles/test_<role>.py (or test_<role>_<aspect>.py): they get the marker role_<role> and their
# role's component. Other tests get the component their directory is named for (DIRECTORY_COMPONENTS).
# Every role is in exactly one component (a unit test checks), so a new role's tests are selected at once.
COMPONENT_ROLES: dict[str, tuple[str, ...]] = {
    "foundation": ("artifact", "base", "lab"),
    "slurm": ("munge", "slurm", "slurm_accounting", "ldap_server", "sssd_client", "cluster_users"),
    "nvidia": ("container_runtime", "cuda", "dcgm", "gdrcopy", "nccl", "nvidia_driver"),
    "fabric": ("aws_ofi_nccl", "efa", "enroot_pyxis", "lustre_client", "nccl_tests", "nvme_scratch"),
    "image": ("image_manifest", "image_prepare", "image_selfcheck", "pytorch"),
    "validation": ("monitoring", "node_health"),
    "launch": ("training_job",),
    "aws": ("aws_foundation", "ecs_agent", "pcs_agent"),
}
ROLE_COMPONENT = {role: component for component, roles in COMPONENT_ROLES.items() for role in roles}
# Directories below tests/ (as posix paths) whose tests all belong to one component.
DIRECTORY_COMPONENTS = {
    "unit/image": "image",
    "unit/validation": "validation",
    "unit/plugins/inventory": "inventory",
    "unit/stacks": "stacks",
    "unit/testcases": "testcases",
    "gpu": "testcases",
    **{f"integration/{name}": name for name in (*COMPONENT_ROLES, "inventory")},
}


def role_of_test_file(path: Path) -> str | None:
    """The role a file under tests/unit/roles is named for (the longest role name that fits), if any."""
    if path.parent != REPO / "tests" / "unit" / "roles":
        return None
    stem = path.stem.removeprefix("test_")
    fitting = [role for role in ROLE_COMPONENT if stem == role or stem.startswith(f"{role}_")]
    return max(fitting, key=len, default=None)


def markers_for_test_file(path: Path) -> list[str]:
    """The component and role markers a test file gets from where it is and what it is named."""
    role = role_of_test_file(path)
    if role is not None:
        return [ROLE_COMPONENT[role], f"role_{role}"]
    relative = path.relative_to(REPO / "tests").as_posix()
    return [
        component
        for directory, component in DIRECTORY_COMPONENTS.items()
        if relative.startswith(f"{directory}/")
    ][:1]
