"""roles/enroot_pyxis: enroot's source build (or package) and pyxis' build on each OS it supports (the role's
own files rendered in process, as a play would: tests/support/roles.py role_templar), and the inputs it
refuses."""

from __future__ import annotations

import subprocess

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
    (
        "enroot_http_scheme",
        "ubuntu2204",
        {"enroot_pyxis_http_registries": ["http://10.77.0.1:8673"]},
        "enroot_pyxis_http_registries",
    ),
    (
        "enroot_http_and_global",
        "ubuntu2204",
        {
            "enroot_pyxis_http_registries": ["10.77.0.1:8673"],
            "enroot_pyxis_config": {"ENROOT_ALLOW_HTTP": "y"},
        },
        "ENROOT_ALLOW_HTTP in enroot_pyxis_config",
    ),
]
# (case id, os, variables)
GOOD_INPUT = [
    ("enroot_ok", "ubuntu2404arm", {}),
    ("enroot_http_registry", "ubuntu2204", {"enroot_pyxis_http_registries": ["10.77.0.1:8673", "reg.lab"]}),
]


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


def allow_http(registries: list[str], *command: str) -> str | None:
    """ENROOT_ALLOW_HTTP as enroot computes it from the role's enroot.conf for ``command``: its config::load
    runs ``$(eval echo "$value")`` in the enroot process itself, whose command line names the image."""
    from ansible.template import trust_as_template

    templar = role_templar(ROLE, "debian12", {"enroot_pyxis_http_registries": registries})
    conf = templar.template(trust_as_template("{{ __enroot_pyxis_conf }}"))
    if "ENROOT_ALLOW_HTTP" not in conf:
        return None
    script = 'value="$1"; shift; eval echo "${value}"'
    evaluated = subprocess.run(
        ["bash", "-c", script, "enroot", conf["ENROOT_ALLOW_HTTP"], *command],
        capture_output=True,
        text=True,
        check=True,
    )
    assert evaluated.stderr == ""
    return evaluated.stdout.strip()


LAB = ["10.77.0.1:8673", "registry.lab"]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["import", "docker://10.77.0.1:8673#lab/probe:1"], "yes"),
        (["import", "-o", "x.sqsh", "docker://user@registry.lab#lab/probe"], "yes"),
        (["load", "--name", "c", "docker://registry.lab#probe"], "yes"),
        # Another registry, the same one under another spelling, or no registry (Docker Hub): HTTPS.
        (["import", "docker://10.77.0.1:8674#lab/probe:1"], "no"),
        (["import", "docker://10x77.0.1:8673#lab/probe:1"], "no"),
        (["import", "docker://10.77.0.1:8673/lab/probe:1"], "no"),
        (["import", "docker://registry.lab.example.com#probe"], "no"),
        (["import", "docker://ubuntu:24.04"], "no"),
        (["start", "probe", "sh", "-c", "echo docker://10.77.0.1:8673#x"], "no"),
    ],
)
def test_plain_http_only_for_the_named_registries(command, expected):
    assert allow_http(LAB, *command) == expected


def test_no_http_registries_leave_https_everywhere():
    assert allow_http([], "import", "docker://10.77.0.1:8673#lab/probe:1") is None


test_bad_input_is_refused_naming_the_variable, test_good_input_passes_validation = input_validation_tests(
    ROLE, BAD_INPUT, GOOD_INPUT
)
