"""Fabric and storage roles: what each resolves per OS, and the inputs each refuses.

Only Debian 12 runs for real here, so the Ubuntu and Amazon Linux paths are covered by the values the roles
resolve for them. The roles' own data is evaluated with Ansible's templar, in process (a playbook per case
costs seconds each): defaults, vars/main.yml, the vars file the role's own first_found list picks for each
OS's facts, and the conditions and messages of each role's tasks/validate.yml asserts.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template

from tests.support import REPO

# The collection's filters (stack_components, stack_os_id, ...) resolve from this checkout, as in a play. A
# conftest may have initialised the loader for the same path already: that is fine, and not worth a warning.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "AnsibleCollectionFinder has already been configured")
    init_plugin_loader([str(REPO / ".cache" / "collections")])

STACK = yaml.safe_load((REPO / "stacks" / "ts-2026.10.yml").read_text())

FACTS = {
    "ubuntu2204": ("Ubuntu", "22.04", "22", "Debian", "x86_64"),
    "ubuntu2404": ("Ubuntu", "24.04", "24", "Debian", "x86_64"),
    "ubuntu2404arm": ("Ubuntu", "24.04", "24", "Debian", "aarch64"),
    "debian12": ("Debian", "12.12", "12", "Debian", "x86_64"),
    "al2023": ("Amazon", "2023", "2023", "RedHat", "x86_64"),
}
CAPTURE = {
    "efa": [
        "__efa_lib_dir",
        "__efa_kernel_headers",
        "efa_installer_version",
        "efa_installer_artifact",
        "__efa_installer_args",
        "__efa_environment",
    ],
    "aws_ofi_nccl": [
        "__aws_ofi_nccl_build_packages",
        "aws_ofi_nccl_version",
        "__aws_ofi_nccl_configure_args",
    ],
    "nccl_tests": ["__nccl_tests_build_packages", "nccl_tests_version", "__nccl_tests_make_args"],
    "enroot_pyxis": [
        "__enroot_pyxis_package_format",
        "__enroot_pyxis_enroot_package",
        "__enroot_pyxis_include_dir",
        "__enroot_pyxis_build_packages",
    ],
    "lustre_client": ["__lustre_client_packages", "__lustre_client_repo", "__lustre_client_supported"],
    "nvme_scratch": ["__nvme_scratch_packages", "__nvme_scratch_settings"],
}

# (case id, role, os, variables, fragment the failure message must contain)
BAD_INPUT = [
    ("efa_memlock", "efa", "ubuntu2204", {"efa_memlock_limit": "lots"}, "efa_memlock_limit"),
    ("efa_ld_preload", "efa", "ubuntu2204", {"efa_environment_extra": {"LD_PRELOAD": "/x.so"}}, "LD_PRELOAD"),
    (
        "efa_env_name",
        "efa",
        "ubuntu2204",
        {"efa_environment_extra": {"bad-name": "1"}},
        "efa_environment_extra",
    ),
    ("efa_hugepages", "efa", "ubuntu2204", {"efa_hugepages": 100000}, "efa_hugepages=100000"),
    ("efa_unpinned_os", "efa", "debian12", {}, "pins no efa_installer for debian-12"),
    ("ofi_source", "aws_ofi_nccl", "ubuntu2204", {"aws_ofi_nccl_source": "pip"}, "aws_ofi_nccl_source"),
    (
        "tests_gencode",
        "nccl_tests",
        "ubuntu2204",
        {"nccl_tests_nvcc_gencode": "sm_90"},
        "nccl_tests_nvcc_gencode",
    ),
    (
        "enroot_config",
        "enroot_pyxis",
        "ubuntu2204",
        {"enroot_pyxis_config": {"FOO": "1"}},
        "enroot_pyxis_config",
    ),
    (
        "enroot_cache",
        "enroot_pyxis",
        "ubuntu2204",
        {"enroot_pyxis_cache_max_gb": 0},
        "enroot_pyxis_cache_max_gb",
    ),
    ("enroot_no_rpm", "enroot_pyxis", "al2023", {}, "a .rpm package"),
    (
        "lustre_mount_name",
        "lustre_client",
        "ubuntu2204",
        {
            "lustre_client_mounts": [
                {"dns_name": "fs-1.fsx.us-east-1.amazonaws.com", "mount_name": "a b", "path": "/fsx"}
            ]
        },
        "lustre_client_mounts",
    ),
    ("lustre_debian", "lustre_client", "debian12", {"lustre_client_install": True}, "lustre_client_install"),
    (
        "scratch_fs",
        "nvme_scratch",
        "ubuntu2204",
        {"nvme_scratch_filesystem": "btrfs"},
        "nvme_scratch_filesystem",
    ),
    (
        "scratch_root",
        "nvme_scratch",
        "ubuntu2204",
        {"nvme_scratch_mount_point": "/"},
        "nvme_scratch_mount_point",
    ),
]

GOOD_INPUT = [
    ("efa_ok", "efa", "ubuntu2204", {"efa_hugepages": 64}),
    (
        "tests_ok",
        "nccl_tests",
        "ubuntu2204",
        {k: "/" for k in ("nccl_tests_cuda_home", "nccl_tests_nccl_home")},
    ),
    ("enroot_ok", "enroot_pyxis", "ubuntu2404arm", {}),
    (
        "lustre_ok",
        "lustre_client",
        "al2023",
        {
            "lustre_client_mounts": [
                {"dns_name": "fs-1.fsx.us-east-1.amazonaws.com", "mount_name": "abc12", "path": "/fsx"}
            ]
        },
    ),
    ("scratch_ok", "nvme_scratch", "al2023", {"nvme_scratch_devices": ["/dev/nvme1n1", "/dev/nvme2n1"]}),
]


def _facts(os_key: str) -> dict:
    distro, version, major, family, arch = FACTS[os_key]
    return {
        "distribution": distro,
        "distribution_version": version,
        "distribution_major_version": major,
        "os_family": family,
        "architecture": arch,
        "kernel": "6.8.0-1015-aws",
        "memtotal_mb": 65536,
        "processor_vcpus": 8,
        "virtualization_role": "host",
        "virtualization_type": "kvm",
    }


def _trust(value: Any) -> Any:
    """Mark role data as trusted templates, as Ansible does for files it loads from a role."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {k: _trust(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trust(v) for v in value]
    return value


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {} if path.exists() else {}


def _os_vars_file(role: Path, templar: Templar) -> Path:
    """The role's own first_found list (tasks/os_vars.yml) rendered for these facts: first file found."""
    task = yaml.safe_load((role / "tasks" / "os_vars.yml").read_text())[0]
    candidates = next(iter(task["vars"].values()))["files"]
    for candidate in candidates:
        path = role / "vars" / templar.template(trust_as_template(candidate))
        if path.exists():
            return path
    raise AssertionError(f"{role.name}: no vars file among {candidates}")


RULES = yaml.safe_load((REPO / "stacks" / "rules.yml").read_text())["rules"]


def role_templar(
    role_name: str, os_key: str, variables: dict | None = None, *, play_stack: bool = True
) -> Templar:
    """Variables as a play sees them after os_vars.yml: defaults < role vars < OS vars < case."""
    role = REPO / "roles" / role_name
    facts = _facts(os_key)
    base = {"ansible_facts": facts, "role_path": str(role), "inventory_hostname": "case"}
    if play_stack:
        # As playbooks/build_image.yml hands it to the roles (parsed once); without it a role reads the
        # collection's stacks/<id>.yml itself (test_standalone_role_reads_the_collections_stack).
        base.update(trainstack_stack=STACK, trainstack_stack_rules=RULES)
    merged = {
        **_trust(_load(role / "defaults" / "main.yml")),
        **_trust(_load(role / "vars" / "main.yml")),
        **base,
    }
    templar = Templar(loader=DataLoader(), variables=merged)
    merged.update(_trust(_load(_os_vars_file(role, templar))))
    merged.update(_trust(variables or {}))
    templar = Templar(loader=DataLoader(), variables=merged)
    # The rest of os_vars.yml: the set_fact that resolves the stack once for the host.
    for task in yaml.safe_load((role / "tasks" / "os_vars.yml").read_text())[1:]:
        facts = task.get("ansible.builtin.set_fact") or {}
        merged.update({k: templar.template(trust_as_template(v)) for k, v in facts.items()})
    return Templar(loader=DataLoader(), variables=merged)


def resolve(role_name: str, os_key: str, names: list[str], *, play_stack: bool = True) -> dict:
    templar = role_templar(role_name, os_key, play_stack=play_stack)
    return {name: templar.template(trust_as_template("{{ " + name + " }}")) for name in names}


def validation_failure(role_name: str, os_key: str, variables: dict) -> str | None:
    """Run the assert tasks of the role's tasks/validate.yml; the first failing one's fail_msg, or None."""
    templar = role_templar(role_name, os_key, variables)
    for task in yaml.safe_load((REPO / "roles" / role_name / "tasks" / "validate.yml").read_text()):
        spec = task.get("ansible.builtin.assert")
        if spec is None:
            continue
        scoped = templar.copy_with_new_env(
            available_variables={**templar.available_variables, **_trust(task.get("vars") or {})}
        )
        conditions = spec["that"] if isinstance(spec["that"], list) else [spec["that"]]
        if not all(scoped.evaluate_conditional(trust_as_template(str(c))) for c in conditions):
            return str(scoped.template(trust_as_template(spec["fail_msg"])))
    return None


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    """Every OS's resolved values for every role."""
    return {
        os_key: {role: resolve(role, os_key, names) for role, names in CAPTURE.items()} for os_key in FACTS
    }


def _values(results: dict, role: str, os_key: str) -> dict:
    return results[os_key][role]


def _artifact(component: str, arch: str = "x86_64") -> dict:
    arts = [a for a in STACK["components"][component]["artifacts"] if a.get("arch", arch) == arch]
    return arts[0]


@pytest.mark.parametrize("os_key", ["ubuntu2204", "ubuntu2404", "al2023"])
def test_efa_takes_the_stacks_installer(results, os_key):
    values = _values(results, "efa", os_key)
    assert values["efa_installer_version"] == STACK["components"]["efa_installer"]["version"]
    assert values["efa_installer_artifact"]["url"] == _artifact("efa_installer")["url"]
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
def test_efa_os_layout(results, os_key, lib_dir, headers):
    values = _values(results, "efa", os_key)
    assert values["__efa_lib_dir"] == lib_dir
    assert values["__efa_kernel_headers"] == headers


def test_efa_environment_is_the_checkers(results):
    env = _values(results, "efa", "ubuntu2404")["__efa_environment"]
    assert env == {k: str(v) for k, v in STACK["environment"].items()}
    assert "LD_PRELOAD" not in env


def test_efa_is_not_pinned_for_the_lab_os(results):
    assert _values(results, "efa", "debian12")["efa_installer_version"] == ""


@pytest.mark.parametrize("os_key", ["ubuntu2204", "al2023"])
def test_aws_ofi_nccl_build_arguments(results, os_key):
    values = _values(results, "aws_ofi_nccl", os_key)
    assert values["aws_ofi_nccl_version"] == STACK["components"]["aws_ofi_nccl"]["version"]
    assert values["__aws_ofi_nccl_configure_args"] == [
        "--prefix=/opt/aws-ofi-nccl",
        "--with-libfabric=/opt/amazon/efa",
        "--with-cuda=/usr/local/cuda",
        "--disable-tests",
        "--enable-platform-aws",
    ]
    assert ("glibc-devel" in values["__aws_ofi_nccl_build_packages"]) == (os_key == "al2023")


def test_nccl_tests_make_arguments(results):
    values = _values(results, "nccl_tests", "ubuntu2404")
    assert values["nccl_tests_version"] == STACK["components"]["nccl_tests"]["version"]
    assert values["__nccl_tests_make_args"] == [
        "MPI=1",
        "CUDA_HOME=/usr/local/cuda",
        "NCCL_HOME=/opt/nvidia/nccl",
        "MPI_HOME=/opt/amazon/openmpi",
    ]


@pytest.mark.parametrize(("os_key", "arch"), [("ubuntu2204", "x86_64"), ("ubuntu2404arm", "aarch64")])
def test_enroot_package_for_os_and_arch(results, os_key, arch):
    values = _values(results, "enroot_pyxis", os_key)
    assert values["__enroot_pyxis_package_format"] == "deb"
    assert values["__enroot_pyxis_enroot_package"]["url"] == _artifact("enroot", arch)["url"]
    assert values["__enroot_pyxis_include_dir"] == "/opt/slurm/include"


def test_enroot_on_debian_builds_against_debians_slurm(results):
    values = _values(results, "enroot_pyxis", "debian12")
    assert values["__enroot_pyxis_include_dir"] == "/usr/include"
    assert "libslurm-dev" in values["__enroot_pyxis_build_packages"]


def test_enroot_on_al2023_wants_an_rpm(results):
    values = _values(results, "enroot_pyxis", "al2023")
    assert values["__enroot_pyxis_package_format"] == "rpm"
    assert values["__enroot_pyxis_enroot_package"] == {}


@pytest.mark.parametrize(("os_key", "codename"), [("ubuntu2204", "jammy"), ("ubuntu2404", "noble")])
def test_lustre_client_ubuntu_repository(results, os_key, codename):
    values = _values(results, "lustre_client", os_key)
    assert f"/ubuntu {codename} main" in values["__lustre_client_repo"]
    assert values["__lustre_client_packages"][0] == "lustre-client-modules-6.8.0-1015-aws"


def test_lustre_client_al2023_and_debian(results):
    assert _values(results, "lustre_client", "al2023")["__lustre_client_packages"] == ["lustre-client"]
    debian = _values(results, "lustre_client", "debian12")
    assert debian["__lustre_client_packages"] == [] and debian["__lustre_client_supported"] is False


def test_nvme_scratch_discovers_only_outside_containers(results):
    settings = _values(results, "nvme_scratch", "al2023")["__nvme_scratch_settings"]
    assert settings["discover"] is True and settings["filesystem"] == "xfs"
    assert "mdadm" in _values(results, "nvme_scratch", "al2023")["__nvme_scratch_packages"]


@pytest.mark.parametrize(
    ("case_id", "fragment"), [(c[0], c[4]) for c in BAD_INPUT], ids=[c[0] for c in BAD_INPUT]
)
def test_bad_input_is_refused_naming_the_variable(case_id, fragment):
    _, role, os_key, variables, _ = next(c for c in BAD_INPUT if c[0] == case_id)
    message = validation_failure(role, os_key, variables)
    assert message is not None and fragment in message


@pytest.mark.parametrize("case_id", [c[0] for c in GOOD_INPUT])
def test_good_input_passes_validation(case_id):
    _, role, os_key, variables = next(c for c in GOOD_INPUT if c[0] == case_id)
    assert validation_failure(role, os_key, variables) is None


def test_standalone_role_reads_the_collections_stack():
    values = resolve("efa", "ubuntu2204", ["efa_installer_version", "__efa_stack_id"], play_stack=False)
    assert values == {
        "efa_installer_version": STACK["components"]["efa_installer"]["version"],
        "__efa_stack_id": STACK["id"],
    }
