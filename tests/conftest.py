"""Session-wide fixtures; the helpers they use live in tests/support.py."""

from __future__ import annotations

import os
import shutil

import pytest


@pytest.fixture(scope="session")
def lab_required() -> None:
    """Skip, saying why, where the lab cannot run (not root, or LXC missing)."""
    if os.geteuid() != 0:
        pytest.skip("the lab needs root")
    if shutil.which("lxc-start") is None:
        pytest.skip("LXC is not installed (make host-deps)")
