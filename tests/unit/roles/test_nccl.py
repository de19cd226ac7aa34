"""roles/nccl on every OS it supports: the NCCL wheel and the repository packages each OS resolves (the shared
playbook run of the NVIDIA roles: the fixture nvidia_resolved), and the inputs it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import NVIDIA_HOSTS, case_params, current_stack, nvidia_role_refusal

ROLE = "nccl"
STACK = current_stack()["components"]


# (case id, entry point, variables, text the error must contain)
BAD_INPUT = [
    ("unknown_source", "main", {"nccl_source": "conda"}, "nccl_source"),
]


@pytest.mark.parametrize(("entry", "extra", "message"), case_params(BAD_INPUT))
def test_bad_input_fails_naming_the_variable(tmp_path: Path, entry: str, extra: dict, message: str) -> None:
    proc = nvidia_role_refusal(tmp_path, ROLE, entry, extra)
    assert proc.returncode != 0 and message in proc.stdout


def test_nccl_wheel_and_packages(nvidia_resolved: dict) -> None:
    version = STACK["nccl"]["version"]
    assert {nvidia_resolved[h]["nccl_version"] for h in NVIDIA_HOSTS} == {version}
    assert nvidia_resolved["debian12"]["nccl_artifacts"] == [a["url"] for a in STACK["nccl"]["artifacts"]]
    assert nvidia_resolved["ubuntu2204"]["nccl_repo_packages"] == [
        f"libnccl2={version}-1+cuda13.0",
        f"libnccl-dev={version}-1+cuda13.0",
    ]
    assert nvidia_resolved["amzn2023"]["nccl_repo_packages"][0] == f"libnccl-{version}-1+cuda13.0"
    assert nvidia_resolved["amzn2023"]["nccl_repo_lib_dir"] == "/usr/lib64"
    assert nvidia_resolved["ubuntu2404"]["nccl_repo_lib_dir"] == "/usr/lib/aarch64-linux-gnu"
