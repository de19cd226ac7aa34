"""roles/container_runtime on every OS it supports: the NVIDIA container toolkit's repository and version each
OS resolves, and the inputs it refuses.

Only Debian 12 runs in the lab; the Ubuntu 22.04/24.04 and Amazon Linux 2023 paths are checked here from the
role's real vars files and the real stack (the fixture nvidia_resolved: one ansible-playbook run for the
NVIDIA roles, tests/support.py). Bad input must fail before any change, naming the variable.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import current_stack, nvidia_role_refusal

ROLE = "container_runtime"
STACK = current_stack()["components"]


# (case id, entry point, variables, text the error must contain)
BAD_INPUT = [
    ("unsupported_engine", "main", {"container_runtime_engine": "podman"}, "container_runtime_engine"),
]


@pytest.mark.parametrize(
    ("entry", "extra", "message"), [c[1:] for c in BAD_INPUT], ids=[c[0] for c in BAD_INPUT]
)
def test_bad_input_fails_naming_the_variable(tmp_path: Path, entry: str, extra: dict, message: str) -> None:
    """Runs in --check against a host whose facts say Debian 12: the role must stop at its checks."""
    proc = nvidia_role_refusal(tmp_path, ROLE, entry, extra)
    assert proc.returncode != 0
    assert message in proc.stdout


def test_toolkit_repository_and_version_per_os(nvidia_resolved: dict) -> None:
    assert (
        nvidia_resolved["ubuntu2404"]["toolkit_repo"]
        == "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"
    )
    assert (
        nvidia_resolved["amzn2023"]["toolkit_repo"]
        == "https://nvidia.github.io/libnvidia-container/stable/rpm/$basearch"
    )
    assert nvidia_resolved["ubuntu2204"]["toolkit_version"] == STACK["nvidia_container_toolkit"]["version"]
    assert nvidia_resolved["debian12"]["toolkit_version"] == ""
