"""roles/enroot_pyxis: enroot's source build (or package) and pyxis' build on each OS it supports (the role's
own files rendered in process, as a play would: tests/support.py role_templar), and the inputs it refuses."""

from __future__ import annotations

import pytest
import yaml

from tests.support import (
    REPO,
    current_stack,
    input_validation_tests,
    role_templar,
    stack_artifact,
)

ROLE = "enroot_pyxis"
STACK = current_stack()
# The previous stack pins enroot's packages (.deb per arch, no .rpm), not its source.
PREVIOUS = yaml.safe_load((REPO / "stacks" / "ts-2026.10.yml").read_text())
CAPTURE = [
    "__enroot_pyxis_package_format",
    "__enroot_pyxis_enroot_package",
    "__enroot_pyxis_enroot_from_source",
    "__enroot_pyxis_enroot_make_vars",
    "__enroot_pyxis_include_dir",
    "__enroot_pyxis_build_packages",
]
# (case id, os, variables, fragment the failure message must contain)
BAD_INPUT = [
    ("enroot_config", "ubuntu2204", {"enroot_pyxis_config": {"FOO": "1"}}, "enroot_pyxis_config"),
    ("enroot_cache", "ubuntu2204", {"enroot_pyxis_cache_max_gb": 0}, "enroot_pyxis_cache_max_gb"),
    ("enroot_prefix", "ubuntu2204", {"enroot_pyxis_enroot_prefix": "usr"}, "enroot_pyxis_enroot_prefix"),
    (
        "enroot_cache_dir",
        "ubuntu2204",
        {"enroot_pyxis_build_cache_dir": "cache"},
        "enroot_pyxis_build_cache_dir",
    ),
    ("enroot_no_rpm", "al2023", {"trainstack_stack": PREVIOUS}, "a .rpm package"),
]
# (case id, os, variables)
GOOD_INPUT = [("enroot_ok", "ubuntu2404arm", {})]


def previous_stack_values(os_key: str) -> dict:
    """CAPTURE as the role resolves it when the play hands it the previous stack."""
    from ansible.template import trust_as_template

    templar = role_templar(ROLE, os_key, {"trainstack_stack": PREVIOUS})
    return {name: templar.template(trust_as_template("{{ " + name + " }}")) for name in CAPTURE}


@pytest.mark.parametrize("os_key", ["ubuntu2204", "ubuntu2404arm", "al2023"])
def test_enroot_built_from_the_stacks_source_on_every_os(os_values, os_key):
    """The current stack pins enroot's source: every OS and arch builds that one tarball, into the packages'
    layout (/usr) with its configuration in /etc/enroot, where configure.yml writes."""
    values = os_values[os_key]
    assert values["__enroot_pyxis_enroot_from_source"] is True
    assert values["__enroot_pyxis_enroot_package"]["url"] == stack_artifact("enroot", "x86_64")["url"]
    assert values["__enroot_pyxis_enroot_package"]["url"].endswith(
        f"/enroot-{STACK['components']['enroot']['version']}.tar.gz"
    )
    assert values["__enroot_pyxis_enroot_make_vars"] == ["prefix=/usr", "sysconfdir=/etc"]
    assert "patch" in values["__enroot_pyxis_build_packages"]


@pytest.mark.parametrize(("os_key", "arch"), [("ubuntu2204", "x86_64"), ("ubuntu2404arm", "aarch64")])
def test_enroot_package_where_the_stack_pins_one(os_key, arch):
    """The previous stack pins enroot's .deb per arch: installed as a package, not built."""
    values = previous_stack_values(os_key)
    assert values["__enroot_pyxis_enroot_from_source"] is False
    assert values["__enroot_pyxis_package_format"] == "deb"
    assert values["__enroot_pyxis_enroot_package"]["url"].endswith(
        f"_{'amd64' if arch == 'x86_64' else 'arm64'}.deb"
    )
    assert values["__enroot_pyxis_include_dir"] == "/opt/slurm/include"


def test_enroot_on_debian_builds_against_debians_slurm(os_values):
    values = os_values["debian12"]
    assert values["__enroot_pyxis_include_dir"] == "/usr/include"
    assert "libslurm-dev" in values["__enroot_pyxis_build_packages"]


def test_enroot_on_al2023_without_source_wants_an_rpm():
    values = previous_stack_values("al2023")
    assert values["__enroot_pyxis_package_format"] == "rpm"
    assert values["__enroot_pyxis_enroot_package"] == {}


test_bad_input_is_refused_naming_the_variable, test_good_input_passes_validation = input_validation_tests(
    ROLE, BAD_INPUT, GOOD_INPUT
)
