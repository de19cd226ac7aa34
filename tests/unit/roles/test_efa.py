"""roles/efa: the EFA installer, its OS layout and the job environment it writes on each OS it supports (the
role's own files rendered in process, as a play would: tests/support/roles.py role_templar), and the inputs it
refuses."""

from __future__ import annotations

import pytest

from tests.support import (
    current_stack,
    input_validation_tests,
    resolve_role_vars,
    stack_artifact,
)

ROLE = "efa"
STACK = current_stack()
CAPTURE = [
    "__efa_lib_dir",
    "__efa_kernel_headers",
    "efa_installer_version",
    "efa_installer_artifact",
    "__efa_installer_args",
    "__efa_environment",
]
# (case id, os, variables, fragment the failure message must contain)
BAD_INPUT = [
    ("efa_memlock", "ubuntu2204", {"efa_memlock_limit": "lots"}, "efa_memlock_limit"),
    ("efa_ld_preload", "ubuntu2204", {"efa_environment_extra": {"LD_PRELOAD": "/x.so"}}, "LD_PRELOAD"),
    ("efa_env_name", "ubuntu2204", {"efa_environment_extra": {"bad-name": "1"}}, "efa_environment_extra"),
    ("efa_hugepages", "ubuntu2204", {"efa_hugepages": 100000}, "efa_hugepages=100000"),
    ("efa_unpinned_os", "debian12", {}, "pins no efa_installer for debian-12"),
]
# (case id, os, variables)
GOOD_INPUT = [("efa_ok", "ubuntu2204", {"efa_hugepages": 64})]


@pytest.mark.parametrize("os_key", ["ubuntu2204", "ubuntu2404", "al2023"])
def test_efa_takes_the_stacks_installer(os_values, os_key):
    values = os_values[os_key]
    assert values["efa_installer_version"] == STACK["components"]["efa_installer"]["version"]
    assert values["efa_installer_artifact"]["url"] == stack_artifact("efa_installer")["url"]
    assert values["__efa_installer_args"] == ["-y", "--skip-limit-conf", "--no-verify"]


@pytest.mark.parametrize(
    ("os_key", "lib_dir", "headers"),
    [
        ("ubuntu2204", "/opt/amazon/efa/lib", "linux-headers-6.8.0-1015-aws"),
        ("ubuntu2404", "/opt/amazon/efa/lib", "linux-headers-6.8.0-1015-aws"),
        ("debian12", "/opt/amazon/efa/lib", "linux-headers-6.8.0-1015-aws"),
        ("al2023", "/opt/amazon/efa/lib64", "kernel-devel-6.8.0-1015-aws"),
    ],
)
def test_efa_os_layout(os_values, os_key, lib_dir, headers):
    values = os_values[os_key]
    assert values["__efa_lib_dir"] == lib_dir
    assert values["__efa_kernel_headers"] == headers


def test_efa_environment_is_the_checkers(os_values):
    env = os_values["ubuntu2404"]["__efa_environment"]
    assert env == {k: str(v) for k, v in STACK["environment"].items()}
    assert "LD_PRELOAD" not in env


def test_efa_is_not_pinned_for_the_lab_os(os_values):
    assert os_values["debian12"]["efa_installer_version"] == ""


def test_standalone_role_reads_the_collections_stack():
    values = resolve_role_vars(
        "efa", "ubuntu2204", ["efa_installer_version", "__efa_stack_id"], play_stack=False
    )
    assert values == {
        "efa_installer_version": STACK["components"]["efa_installer"]["version"],
        "__efa_stack_id": STACK["id"],
    }


test_bad_input_is_refused_naming_the_variable, test_good_input_passes_validation = input_validation_tests(
    ROLE, BAD_INPUT, GOOD_INPUT
)
