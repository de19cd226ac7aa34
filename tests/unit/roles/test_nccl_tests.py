"""roles/nccl_tests on every OS it supports: the nccl-tests build, and the inputs it refuses.

Only Debian 12 runs for real here, so the Ubuntu and Amazon Linux paths are covered by the values the role
resolves for them, rendered with Ansible's templar from the role's own files (tests/support.py: role_templar).
"""

from __future__ import annotations

import pytest

from tests.support import OS_FACTS, current_stack, resolve_role_vars, role_validation_failure

ROLE = "nccl_tests"
STACK = current_stack()
CAPTURE = ["__nccl_tests_build_packages", "nccl_tests_version", "__nccl_tests_make_args"]
# (case id, os, variables, fragment the failure message must contain)
BAD_INPUT = [("tests_gencode", "ubuntu2204", {"nccl_tests_nvcc_gencode": "sm_90"}, "nccl_tests_nvcc_gencode")]
# (case id, os, variables)
GOOD_INPUT = [("tests_ok", "ubuntu2204", {"nccl_tests_cuda_home": "/", "nccl_tests_nccl_home": "/"})]


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    """Every OS's resolved values of CAPTURE."""
    return {os_key: resolve_role_vars(ROLE, os_key, CAPTURE) for os_key in OS_FACTS}


def test_nccl_tests_make_arguments(results):
    values = results["ubuntu2404"]
    assert values["nccl_tests_version"] == STACK["components"]["nccl_tests"]["version"]
    assert values["__nccl_tests_make_args"] == [
        "MPI=1",
        "CUDA_HOME=/usr/local/cuda",
        "NCCL_HOME=/opt/nvidia/nccl",
        "MPI_HOME=/opt/amazon/openmpi",
    ]


@pytest.mark.parametrize(
    ("os_key", "variables", "fragment"), [c[1:] for c in BAD_INPUT], ids=[c[0] for c in BAD_INPUT]
)
def test_bad_input_is_refused_naming_the_variable(os_key, variables, fragment):
    message = role_validation_failure(ROLE, os_key, variables)
    assert message is not None and fragment in message


@pytest.mark.parametrize(("os_key", "variables"), [c[1:] for c in GOOD_INPUT], ids=[c[0] for c in GOOD_INPUT])
def test_good_input_passes_validation(os_key, variables):
    assert role_validation_failure(ROLE, os_key, variables) is None
