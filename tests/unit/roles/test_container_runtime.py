"""roles/container_runtime on every OS it supports: the NVIDIA container toolkit's repository and version each
OS resolves (the shared playbook run of the NVIDIA roles: the fixture nvidia_resolved), and the inputs it
refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import case_params, current_stack, nvidia_role_refusal

ROLE = "container_runtime"
STACK = current_stack()["components"]


# (case id, entry point, variables, text the error must contain)
BAD_INPUT = [
    ("unsupported_engine", "main", {"container_runtime_engine": "podman"}, "container_runtime_engine"),
]


@pytest.mark.parametrize(("entry", "extra", "message"), case_params(BAD_INPUT))
def test_bad_input_fails_naming_the_variable(tmp_path: Path, entry: str, extra: dict, message: str) -> None:
    proc = nvidia_role_refusal(tmp_path, ROLE, entry, extra)
    assert proc.returncode != 0 and message in proc.stdout


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
