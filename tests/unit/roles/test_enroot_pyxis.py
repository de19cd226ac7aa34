"""roles/enroot_pyxis: enroot's package and pyxis' build on each OS it supports (the role's own files rendered
in process, as a play would: tests/support.py role_templar), and the inputs it refuses."""

from __future__ import annotations

import pytest

from tests.support import (
    current_stack,
    input_validation_tests,
    stack_artifact,
)

ROLE = "enroot_pyxis"
STACK = current_stack()
CAPTURE = [
    "__enroot_pyxis_package_format",
    "__enroot_pyxis_enroot_package",
    "__enroot_pyxis_include_dir",
    "__enroot_pyxis_build_packages",
]
# (case id, os, variables, fragment the failure message must contain)
BAD_INPUT = [
    ("enroot_config", "ubuntu2204", {"enroot_pyxis_config": {"FOO": "1"}}, "enroot_pyxis_config"),
    ("enroot_cache", "ubuntu2204", {"enroot_pyxis_cache_max_gb": 0}, "enroot_pyxis_cache_max_gb"),
    ("enroot_no_rpm", "al2023", {}, "a .rpm package"),
]
# (case id, os, variables)
GOOD_INPUT = [("enroot_ok", "ubuntu2404arm", {})]


@pytest.mark.parametrize(("os_key", "arch"), [("ubuntu2204", "x86_64"), ("ubuntu2404arm", "aarch64")])
def test_enroot_package_for_os_and_arch(os_values, os_key, arch):
    values = os_values[os_key]
    assert values["__enroot_pyxis_package_format"] == "deb"
    assert values["__enroot_pyxis_enroot_package"]["url"] == stack_artifact("enroot", arch)["url"]
    assert values["__enroot_pyxis_include_dir"] == "/opt/slurm/include"


def test_enroot_on_debian_builds_against_debians_slurm(os_values):
    values = os_values["debian12"]
    assert values["__enroot_pyxis_include_dir"] == "/usr/include"
    assert "libslurm-dev" in values["__enroot_pyxis_build_packages"]


def test_enroot_on_al2023_wants_an_rpm(os_values):
    values = os_values["al2023"]
    assert values["__enroot_pyxis_package_format"] == "rpm"
    assert values["__enroot_pyxis_enroot_package"] == {}


test_bad_input_is_refused_naming_the_variable, test_good_input_passes_validation = input_validation_tests(
    ROLE, BAD_INPUT, GOOD_INPUT
)
