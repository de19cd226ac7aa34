"""roles/cuda on every OS it supports: the CUDA repository tree and packages each OS resolves (the shared
playbook run of the NVIDIA roles: the fixture nvidia_resolved), and the inputs it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import case_params, current_stack, nvidia_role_refusal

ROLE = "cuda"
STACK = current_stack()["components"]


# (case id, entry point, variables, text the error must contain)
BAD_INPUT = [
    ("version_without_minor", "main", {"cuda_versions": ["13"]}, "cuda_versions (['13'])"),
]


@pytest.mark.parametrize(("entry", "extra", "message"), case_params(BAD_INPUT))
def test_bad_input_fails_naming_the_variable(tmp_path: Path, entry: str, extra: dict, message: str) -> None:
    proc = nvidia_role_refusal(tmp_path, ROLE, entry, extra)
    assert proc.returncode != 0 and message in proc.stdout


def test_cuda_repository_trees(nvidia_resolved: dict) -> None:
    base = "https://developer.download.nvidia.com/compute/cuda/repos"
    assert nvidia_resolved["ubuntu2204"]["cuda_repo"] == f"{base}/ubuntu2204/x86_64/"
    assert nvidia_resolved["ubuntu2404"]["cuda_repo"] == f"{base}/ubuntu2404/sbsa/"
    assert nvidia_resolved["amzn2023"]["cuda_key"] == f"{base}/amzn2023/x86_64/D42D0685.pub"
    assert nvidia_resolved["debian12"]["cuda_repo"] == f"{base}/debian12/x86_64/"
    major, minor = STACK["cuda"]["version"].split(".")
    assert nvidia_resolved["ubuntu2204"]["cuda_packages"] == [f"cuda-toolkit-{major}-{minor}"]
    assert nvidia_resolved["debian12"]["cuda_versions"] == []
