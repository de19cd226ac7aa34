"""The NVIDIA roles' variables per OS, resolved by ansible-playbook.

Only Debian 12 runs in the lab; Ubuntu 22.04/24.04 and Amazon Linux 2023 paths are checked by what the roles
resolve for hosts with those facts (repository URLs, package specs, paths, flavour and fabric-manager
choices). Unlike roles.py these run a real playbook (one for every host at once): the NVIDIA roles pick their
OS vars with include_role and first_found, which the in-process templar does not imitate.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from .collection import REPO, VENV_BIN, run

NVIDIA_ROLES = ["nvidia_driver", "cuda", "nccl", "gdrcopy", "dcgm", "container_runtime"]
# name: (distribution, version, major, os_family, release, architecture, instance family)
NVIDIA_HOSTS = {
    "ubuntu2204": ("Ubuntu", "22.04", "22", "Debian", "jammy", "x86_64", "p6-b200"),
    "ubuntu2404": ("Ubuntu", "24.04", "24", "Debian", "noble", "aarch64", "p5"),
    "amzn2023": ("Amazon", "2023", "2023", "RedHat", "", "x86_64", "g6e"),
    "debian12": ("Debian", "12", "12", "Debian", "bookworm", "x86_64", ""),
}

NVIDIA_FACT_KEYS = [
    "distribution",
    "distribution_version",
    "distribution_major_version",
    "os_family",
    "distribution_release",
    "architecture",
]
NVIDIA_RESOLVED = {
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


def nvidia_inventory(tmp: Path) -> Path:
    """An inventory of NVIDIA_NVIDIA_HOSTS, run locally, each with its stand-in facts and instance family."""
    hosts = {}
    for name, (distro, version, major, family, release, arch, instance) in NVIDIA_HOSTS.items():
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


def _nvidia_resolve_playbook(tmp: Path) -> Path:
    play = {
        "name": "Resolve the NVIDIA roles' variables",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Fake facts",
                "ansible.builtin.set_fact": {
                    "cacheable": True,
                    **{key: f"{{{{ fake_facts.{key} }}}}" for key in NVIDIA_FACT_KEYS},
                },
            },
            {
                "name": "Load OS vars",
                "ansible.builtin.include_role": {
                    "name": "trainstack.cluster.{{ item }}",
                    "tasks_from": "os_vars",
                    "public": True,
                },
                "loop": NVIDIA_ROLES,
            },
            {
                "name": "Write",
                "ansible.builtin.copy": {
                    "content": "{{ resolved | to_json }}",
                    "dest": f"{tmp}/{{{{ inventory_hostname }}}}.json",
                    "mode": "0644",
                },
                "vars": {"resolved": NVIDIA_RESOLVED},
            },
        ],
    }
    path = tmp / "resolve.yml"
    path.write_text(yaml.safe_dump([play], sort_keys=False))
    return path


def resolve_nvidia_roles(tmp: Path) -> dict[str, dict]:
    """Every NVIDIA_HOSTS host's NVIDIA_RESOLVED values: one ansible-playbook run loads every NVIDIA role's OS
    vars (first_found, as the roles do) for hosts whose facts are set to the systems the roles support."""
    import json

    playbook_path = _nvidia_resolve_playbook(tmp)
    run([str(VENV_BIN / "ansible-playbook"), "-i", str(nvidia_inventory(tmp)), str(playbook_path)])
    return {name: json.loads((tmp / f"{name}.json").read_text()) for name in NVIDIA_HOSTS}


def nvidia_role_refusal(tmp_path: Path, role: str, entry: str, extra: dict) -> subprocess.CompletedProcess:
    """One NVIDIA role's entry point in --check on the Debian 12 host with these variables (a bad input must
    stop it at its checks, before any change)."""
    tasks = [
        {
            "name": "Fake facts",
            "ansible.builtin.set_fact": {
                "cacheable": True,
                **{k: f"{{{{ fake_facts.{k} }}}}" for k in NVIDIA_FACT_KEYS},
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
    return run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "--check",
            "-i",
            str(nvidia_inventory(tmp_path)),
            str(playbook),
        ],
        check=False,
    )
