"""roles/aws_ofi_nccl on every OS it supports: the aws-ofi-nccl plugin's build, and the inputs it refuses.

Only Debian 12 runs for real here, so the Ubuntu and Amazon Linux paths are covered by the values the role
resolves for them, rendered with Ansible's templar from the role's own files (tests/support.py: role_templar).
"""

from __future__ import annotations

import pytest

from tests.support import OS_FACTS, current_stack, resolve_role_vars, role_validation_failure

ROLE = "aws_ofi_nccl"
STACK = current_stack()
CAPTURE = ["__aws_ofi_nccl_build_packages", "aws_ofi_nccl_version", "__aws_ofi_nccl_configure_args"]
# (case id, os, variables, fragment the failure message must contain)
BAD_INPUT = [("ofi_source", "ubuntu2204", {"aws_ofi_nccl_source": "pip"}, "aws_ofi_nccl_source")]


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    """Every OS's resolved values of CAPTURE."""
    return {os_key: resolve_role_vars(ROLE, os_key, CAPTURE) for os_key in OS_FACTS}


@pytest.mark.parametrize("os_key", ["ubuntu2204", "al2023"])
def test_aws_ofi_nccl_build_arguments(results, os_key):
    values = results[os_key]
    assert values["aws_ofi_nccl_version"] == STACK["components"]["aws_ofi_nccl"]["version"]
    assert values["__aws_ofi_nccl_configure_args"] == [
        "--prefix=/opt/aws-ofi-nccl",
        "--with-libfabric=/opt/amazon/efa",
        "--with-cuda=/usr/local/cuda",
        "--disable-tests",
        "--enable-platform-aws",
    ]
    assert ("glibc-devel" in values["__aws_ofi_nccl_build_packages"]) == (os_key == "al2023")


@pytest.mark.parametrize(
    ("os_key", "variables", "fragment"), [c[1:] for c in BAD_INPUT], ids=[c[0] for c in BAD_INPUT]
)
def test_bad_input_is_refused_naming_the_variable(os_key, variables, fragment):
    message = role_validation_failure(ROLE, os_key, variables)
    assert message is not None and fragment in message
