# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Filters that read a stack for one host: which versions and which downloads apply to it.

Why filters: roles (NVIDIA, EFA, Slurm...) take their defaults from the stack; a filter keeps the OS/arch
resolution in module_utils/stack_matrix instead of re-implementing `by_os` merging in Jinja.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.trainstack.cluster.plugins.module_utils.stack_matrix import (
    StackError,
    artifacts,
    resolve,
    versions,
)

DOCUMENTATION = r"""
name: stack_versions
short_description: Component versions of a stack for one OS and architecture
"""

_OS_PREFIX = {"amazon": "amzn", "ubuntu": "ubuntu", "debian": "debian", "redhat": "rhel", "rocky": "rocky"}


def stack_os_id(facts: dict[str, Any]) -> str:
    """Stack OS id from Ansible facts: Ubuntu keeps 'major.minor' (22.04), others use the major version."""
    distro = str(facts.get("distribution", "")).lower()
    prefix = _OS_PREFIX.get(distro)
    if prefix is None:
        raise AnsibleFilterError(
            f"stack_os_id: distribution '{facts.get('distribution')}' is not in any stack"
        )
    version = (
        facts.get("distribution_version") if distro == "ubuntu" else facts.get("distribution_major_version")
    )
    return f"{prefix}-{version}"


def _guard(func: Any, *args: Any) -> Any:
    try:
        return func(*args)
    except StackError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def stack_versions(stack: dict[str, Any], os_id: str, arch: str) -> dict[str, str]:
    """{component: version} for one OS/arch."""
    return _guard(versions, stack, os_id, arch)


def stack_components(stack: dict[str, Any], os_id: str, arch: str) -> dict[str, dict[str, Any]]:
    """Resolved component records (by_os merged, other arches' artifacts dropped)."""
    return _guard(resolve, stack, os_id, arch)


def stack_artifacts(stack: dict[str, Any], os_id: str, arch: str) -> list[dict[str, Any]]:
    """Artifacts (name, url, sha256, component) one OS/arch downloads."""
    return _guard(artifacts, stack, os_id, arch)


class FilterModule:
    """trainstack.cluster stack filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "stack_os_id": stack_os_id,
            "stack_versions": stack_versions,
            "stack_components": stack_components,
            "stack_artifacts": stack_artifacts,
        }
