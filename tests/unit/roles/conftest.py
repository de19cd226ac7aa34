"""Ansible's plugin loader points at this checkout before this directory's test modules load; fixtures that
several roles' test files share."""

from __future__ import annotations

import pytest

from tests.support import init_ansible_plugins, resolve_nvidia_roles

init_ansible_plugins()


@pytest.fixture(scope="session")
def nvidia_resolved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """What the NVIDIA roles resolve on each OS they support: one playbook run shared by their test files."""
    return resolve_nvidia_roles(tmp_path_factory.mktemp("nvidia_vars"))
