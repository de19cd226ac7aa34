"""roles/aws_ofi_nccl: the aws-ofi-nccl plugin's build on each OS it supports (the role's own files rendered
in process, as a play would: tests/support/roles.py role_templar), and the inputs it refuses."""

from __future__ import annotations

import pytest
from ansible.template import trust_as_template

from tests.support import case_params, current_stack, role_templar, role_validation_failure

ROLE = "aws_ofi_nccl"
STACK = current_stack()
CAPTURE = [
    "__aws_ofi_nccl_build_packages",
    "__aws_ofi_nccl_autotools_packages",
    "aws_ofi_nccl_version",
    "__aws_ofi_nccl_configure_args",
]
# (case id, os, variables, fragment the failure message must contain)
BAD_INPUT = [
    ("ofi_source", "ubuntu2204", {"aws_ofi_nccl_source": "pip"}, "aws_ofi_nccl_source"),
    (
        "ofi_cache_dir",
        "ubuntu2204",
        {"aws_ofi_nccl_build_cache_dir": "builds"},
        "aws_ofi_nccl_build_cache_dir",
    ),
]


@pytest.mark.parametrize("os_key", ["ubuntu2204", "al2023"])
def test_aws_ofi_nccl_build_arguments(os_values, os_key):
    values = os_values[os_key]
    assert values["aws_ofi_nccl_version"] == STACK["components"]["aws_ofi_nccl"]["version"]
    assert values["__aws_ofi_nccl_configure_args"] == [
        "--prefix=/opt/aws-ofi-nccl",
        "--with-libfabric=/opt/amazon/efa",
        "--with-cuda=/usr/local/cuda",
        "--disable-tests",
        "--enable-platform-aws",
    ]
    assert ("glibc-devel" in values["__aws_ofi_nccl_build_packages"]) == (os_key == "al2023")
    # A source archive of the tag needs autotools; the plugin needs hwloc.
    assert values["__aws_ofi_nccl_autotools_packages"] == ["autoconf", "automake", "libtool"]
    assert ("hwloc-devel" if os_key == "al2023" else "libhwloc-dev") in values[
        "__aws_ofi_nccl_build_packages"
    ]


def test_without_the_aws_platform_configure_is_told_so():
    """Left out, configure would probe whether it runs on EC2; the lab (libfabric 1.17) says no explicitly."""
    templar = role_templar(ROLE, "debian12", {"aws_ofi_nccl_platform_aws": False})
    args = templar.template(trust_as_template("{{ __aws_ofi_nccl_configure_args }}"))
    assert args[-1] == "--disable-platform-aws" and "--enable-platform-aws" not in args


@pytest.mark.parametrize(("os_key", "variables", "fragment"), case_params(BAD_INPUT))
def test_bad_input_is_refused_naming_the_variable(os_key, variables, fragment):
    message = role_validation_failure(ROLE, os_key, variables)
    assert message is not None and fragment in message
