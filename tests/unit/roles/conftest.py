"""Ansible's plugin loader points at this checkout before this directory's test modules load; fixtures that
several roles' test files share."""

from __future__ import annotations

import pytest

from tests.support import OS_FACTS, init_ansible_plugins, resolve_nvidia_roles, resolve_role_vars

init_ansible_plugins()


@pytest.fixture(scope="session")
def nvidia_resolved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """What the NVIDIA roles resolve on each OS they support: one playbook run shared by their test files."""
    return resolve_nvidia_roles(tmp_path_factory.mktemp("nvidia_vars"))


@pytest.fixture(scope="module")
def os_values(request: pytest.FixtureRequest) -> dict[str, dict]:
    """The values of the test module's CAPTURE as its ROLE resolves them, for every OS in OS_FACTS."""
    role, names = request.module.ROLE, request.module.CAPTURE
    return {os_key: resolve_role_vars(role, os_key, names) for os_key in OS_FACTS}
