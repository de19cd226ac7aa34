"""Session-wide fixtures and the component markers; the helpers they use live in tests/support/."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.support import CURRENT_STACK_ID, ROLE_COMPONENT, markers_for_test_file


def pytest_configure(config: pytest.Config) -> None:
    """Declare one marker per role (the component markers are declared in pyproject.toml)."""
    for role, component in sorted(ROLE_COMPONENT.items()):
        config.addinivalue_line("markers", f"role_{role}: tests of roles/{role} (component {component})")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its file's component and role, so that make targets select with -m, not paths."""
    for item in items:
        for name in markers_for_test_file(item.path):
            item.add_marker(getattr(pytest.mark, name))


@pytest.fixture(scope="session")
def lab_required() -> None:
    """Skip, saying why, where the lab cannot run (not root, or LXC missing)."""
    if os.geteuid() != 0:
        pytest.skip("the lab needs root")
    if shutil.which("lxc-start") is None:
        pytest.skip("LXC is not installed (make host-deps)")


@pytest.fixture(scope="session")
def current_stack_id() -> str:
    """The id of the current stack (stacks/current): for tests about whatever stack is current, so that
    rolling the stack forward needs no test edit. Module-level code uses tests.support.CURRENT_STACK_ID."""
    return CURRENT_STACK_ID
