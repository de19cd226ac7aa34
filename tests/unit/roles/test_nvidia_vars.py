"""What the NVIDIA roles resolve on each OS they support, from their real vars files and the real stack.

Only Debian 12 runs in the lab; Ubuntu 22.04/24.04 and Amazon Linux 2023 paths are checked here: one
ansible-playbook run loads every role's OS vars (first_found, as the roles do) for four hosts whose facts are
set to those systems, and renders the values the install tasks use (repository URLs, package specs, paths,
flavour and fabric-manager choices). Bad input is checked to fail before any change, naming the variable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import REPO, run

ROLES = ["nvidia_driver", "cuda", "nccl", "gdrcopy", "dcgm", "container_runtime"]
# Several roles' tests in one file (one playbook run renders them all): its markers are named here.
pytestmark = [pytest.mark.nvidia, *(getattr(pytest.mark, f"role_{role}") for role in ROLES)]
STACK = yaml.safe_load((REPO / "stacks" / "ts-2026.10.yml").read_text())["components"]

# name: (distribution, version, major, os_family, release, architecture, instance family)
HOSTS = {
    "ubuntu2204": ("Ubuntu", "22.04", "22", "Debian", "jammy", "x86_64", "p6-b200"),
    "ubuntu2404": ("Ubuntu", "24.04", "24", "Debian", "noble", "aarch64", "p5"),
    "amzn2023": ("Amazon", "2023", "2023", "RedHat", "", "x86_64", "g6e"),
    "debian12": ("Debian", "12", "12", "Debian", "bookworm", "x86_64", ""),
}

FACT_KEYS = [
    "distribution",
    "distribution_version",
    "distribution_major_version",
    "os_family",
    "distribution_release",
    "architecture",
]
RESOLVED = {
    "driver_version": "{{ nvidia_driver_version }}",
    "driver_source": "{{ __nvidia_driver_source }}",
    "driver_flavour": "{{ __nvidia_driver_flavour }}",
    "driver_packages": "{{ __nvidia_driver_packages }}",
    "driver_fabricmanager": "{{ __nvidia_driver_use_fabricmanager | bool }}",
    "driver_nvlsm": "{{ __nvidia_driver_use_nvlsm | bool }}",
    "driver_hold": "{{ __nvidia_driver_hold_method }}",
    "driver_headers": "{{ __nvidia_driver_headers_package }}",
    "cuda_versions": "{{ cuda_versions }}",
    "cuda_packages": "{{ __cuda_packages }}",
    "cuda_repo": "{{ __cuda_repo_effective_url }}",
    "cuda_key": "{{ __cuda_repo_effective_key_url }}",
    "nccl_version": "{{ nccl_version }}",
    "nccl_artifacts": "{{ nccl_artifacts | map(attribute='url') | list }}",
    "nccl_repo_packages": "{{ __nccl_repo_packages | map('replace', '{version}', nccl_version)"
    " | map('replace', '{cuda}', nccl_repo_cuda_version) | list }}",
    "nccl_repo_lib_dir": "{{ __nccl_repo_lib_dir }}",
    "gdrcopy_version": "{{ gdrcopy_version }}",
    "gdrcopy_headers": "{{ __gdrcopy_headers_package }}",
    "dcgm_version": "{{ dcgm_version }}",
    "dcgm_spec": "{{ __dcgm_version_spec }}",
    "toolkit_version": "{{ container_runtime_toolkit_version }}",
    "toolkit_repo": "{{ __container_runtime_repo_effective_url }}",
    "toolkit_spec": "{{ __container_runtime_version_spec }}",
}


def _inventory(tmp: Path) -> Path:
    hosts = {}
    for name, (distro, version, major, family, release, arch, instance) in HOSTS.items():
        hosts[name] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": str(REPO / ".venv" / "bin" / "python"),
            "fake_facts": {
                "distribution": distro,
                "distribution_version": version,
                "distribution_major_version": major,
                "os_family": family,
                "distribution_release": release,
                "architecture": arch,
            },
            "nvidia_driver_instance_family": instance,
        }
    path = tmp / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return path


def _playbook(tmp: Path) -> Path:
    play = {
        "name": "Resolve the NVIDIA roles' variables",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Fake facts",
                "ansible.builtin.set_fact": {
                    "cacheable": True,
                    **{key: f"{{{{ fake_facts.{key} }}}}" for key in FACT_KEYS},
                },
            },
            {
                "name": "Load OS vars",
                "ansible.builtin.include_role": {
                    "name": "trainstack.cluster.{{ item }}",
                    "tasks_from": "os_vars",
                    "public": True,
                },
                "loop": ROLES,
            },
            {
                "name": "Write",
                "ansible.builtin.copy": {
                    "content": "{{ resolved | to_json }}",
                    "dest": f"{tmp}/{{{{ inventory_hostname }}}}.json",
                    "mode": "0644",
                },
                "vars": {"resolved": RESOLVED},
            },
        ],
    }
    path = tmp / "resolve.yml"
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    return path


@pytest.fixture(scope="module")
def resolved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("nvidia_vars")
    run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(_inventory(tmp)), str(_playbook(tmp))])
    return {name: json.loads((tmp / f"{name}.json").read_text()) for name in HOSTS}


def test_driver_defaults_follow_the_stack(resolved: dict) -> None:
    pin = STACK["nvidia_driver"]["version"]
    assert [resolved[h]["driver_version"] for h in ("ubuntu2204", "ubuntu2404", "amzn2023")] == [pin] * 3
    # The stack pins no driver for the Debian lab image: the role skips there.
    assert resolved["debian12"]["driver_version"] == ""


def test_driver_sources_and_packages_per_os(resolved: dict) -> None:
    branch = STACK["nvidia_driver"]["version"].split(".")[0]
    assert resolved["ubuntu2404"]["driver_source"] == "nvidia_repo"
    assert resolved["ubuntu2404"]["driver_packages"] == [f"nvidia-open-{branch}"]
    assert resolved["debian12"]["driver_source"] == "distribution"
    amzn = resolved["amzn2023"]
    assert amzn["driver_packages"][0] == f"kmod-nvidia-open-dkms-{STACK['nvidia_driver']['version']}"
    assert (amzn["driver_hold"], amzn["driver_headers"]) == ("versionlock", "kernel-devel-{kernel}")
    assert resolved["ubuntu2204"]["driver_headers"] == "linux-headers-{kernel}"


def test_fabric_manager_only_for_nvswitch_families(resolved: dict) -> None:
    # p6-b200 (NVLink 5): fabric manager and nvlsm; p5: fabric manager; g6e: neither.
    assert (resolved["ubuntu2204"]["driver_fabricmanager"], resolved["ubuntu2204"]["driver_nvlsm"]) == (
        True,
        True,
    )
    assert (resolved["ubuntu2404"]["driver_fabricmanager"], resolved["ubuntu2404"]["driver_nvlsm"]) == (
        True,
        False,
    )
    assert (resolved["amzn2023"]["driver_fabricmanager"], resolved["amzn2023"]["driver_nvlsm"]) == (
        False,
        False,
    )


def test_cuda_repository_trees(resolved: dict) -> None:
    base = "https://developer.download.nvidia.com/compute/cuda/repos"
    assert resolved["ubuntu2204"]["cuda_repo"] == f"{base}/ubuntu2204/x86_64/"
    assert resolved["ubuntu2404"]["cuda_repo"] == f"{base}/ubuntu2404/sbsa/"
    assert resolved["amzn2023"]["cuda_key"] == f"{base}/amzn2023/x86_64/D42D0685.pub"
    assert resolved["debian12"]["cuda_repo"] == f"{base}/debian12/x86_64/"
    major, minor = STACK["cuda"]["version"].split(".")
    assert resolved["ubuntu2204"]["cuda_packages"] == [f"cuda-toolkit-{major}-{minor}"]
    assert resolved["debian12"]["cuda_versions"] == []


def test_nccl_wheel_and_packages(resolved: dict) -> None:
    version = STACK["nccl"]["version"]
    assert {resolved[h]["nccl_version"] for h in HOSTS} == {version}
    assert resolved["debian12"]["nccl_artifacts"] == [a["url"] for a in STACK["nccl"]["artifacts"]]
    assert resolved["ubuntu2204"]["nccl_repo_packages"] == [
        f"libnccl2={version}-1+cuda13.0",
        f"libnccl-dev={version}-1+cuda13.0",
    ]
    assert resolved["amzn2023"]["nccl_repo_packages"][0] == f"libnccl-{version}-1+cuda13.0"
    assert resolved["amzn2023"]["nccl_repo_lib_dir"] == "/usr/lib64"
    assert resolved["ubuntu2404"]["nccl_repo_lib_dir"] == "/usr/lib/aarch64-linux-gnu"


def test_toolkit_dcgm_gdrcopy_per_os(resolved: dict) -> None:
    assert (
        resolved["ubuntu2404"]["toolkit_repo"]
        == "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"
    )
    assert (
        resolved["amzn2023"]["toolkit_repo"]
        == "https://nvidia.github.io/libnvidia-container/stable/rpm/$basearch"
    )
    assert resolved["ubuntu2204"]["toolkit_version"] == STACK["nvidia_container_toolkit"]["version"]
    assert resolved["debian12"]["toolkit_version"] == ""
    assert (resolved["ubuntu2204"]["dcgm_spec"], resolved["amzn2023"]["dcgm_spec"]) == (
        "=1:{version}-*",
        "-{version}",
    )
    assert resolved["ubuntu2404"]["dcgm_version"] == STACK["dcgm"]["version"]
    assert resolved["amzn2023"]["gdrcopy_headers"] == "kernel-devel-{kernel}"
    assert resolved["ubuntu2204"]["gdrcopy_version"] == STACK["gdrcopy"]["version"]


BAD_INPUT = [
    # (role, entry point, extra vars, text the error must contain)
    (
        "nvidia_driver",
        "validate",
        {
            "nvidia_driver_version": "595.91.07",
            "nvidia_driver_kernel_modules": "proprietary",
            "nvidia_driver_instance_family": "p6-b200",
        },
        "nvidia_driver_kernel_modules=proprietary",
    ),
    (
        "nvidia_driver",
        "validate",
        {
            "nvidia_driver_version": "535.261.03",
            "nvidia_driver_kernel_modules": "open",
            "nvidia_driver_instance_family": "p3",
        },
        "open modules need Turing",
    ),
    ("nvidia_driver", "validate", {"nvidia_driver_version": "latest"}, "nvidia_driver_version (latest)"),
    ("nccl", "main", {"nccl_source": "conda"}, "nccl_source"),
    ("cuda", "main", {"cuda_versions": ["13"]}, "cuda_versions (['13'])"),
    ("dcgm", "main", {"dcgm_exporter_port": 5555}, "dcgm_exporter_port (5555)"),
    ("container_runtime", "main", {"container_runtime_engine": "podman"}, "container_runtime_engine"),
]


@pytest.mark.parametrize(
    ("role", "entry", "extra", "message"), BAD_INPUT, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD_INPUT)]
)
def test_bad_input_fails_naming_the_variable(
    tmp_path: Path, role: str, entry: str, extra: dict, message: str
) -> None:
    """Runs in --check against a host whose facts say Debian 12: the role must stop at its checks."""
    tasks = [
        {
            "name": "Fake facts",
            "ansible.builtin.set_fact": {
                "cacheable": True,
                **{k: f"{{{{ fake_facts.{k} }}}}" for k in FACT_KEYS},
            },
        },
    ]
    if entry == "validate":
        tasks.append(
            {
                "name": "OS vars",
                "ansible.builtin.include_role": {
                    "name": f"trainstack.cluster.{role}",
                    "tasks_from": "os_vars",
                },
            }
        )
    tasks.append(
        {
            "name": "Role",
            "ansible.builtin.include_role": {"name": f"trainstack.cluster.{role}", "tasks_from": entry},
        }
    )
    play = {"name": "Bad input", "hosts": "debian12", "gather_facts": False, "vars": extra, "tasks": tasks}
    playbook = tmp_path / "bad.yml"
    playbook.write_text(yaml.safe_dump([play], sort_keys=False))
    proc = run(
        [
            str(REPO / ".venv" / "bin" / "ansible-playbook"),
            "--check",
            "-i",
            str(_inventory(tmp_path)),
            str(playbook),
        ],
        check=False,
    )
    assert proc.returncode != 0
    assert message in proc.stdout
