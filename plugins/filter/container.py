# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Filters of the container image build (playbooks/build_container.yml): the stack as a CUDA container's
layers read it. The rule is module_utils/image/container_stack's, so that it is unit-tested, not written in
Jinja."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.trainstack.cluster.plugins.module_utils.image.container_stack import (
    ContainerStackError,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.image.container_stack import (
    container_stack as _container_stack,
)


def container_stack(stack: dict[str, Any], os_id: str, components: list[str]) -> dict[str, Any]:
    """The stack with ``os_id`` scoped for ``components`` and no longer a lab OS (module_utils docstring)."""
    if not isinstance(stack, dict):
        raise AnsibleFilterError(
            f"container_stack: the input must be a stack document, got {type(stack).__name__}"
        )
    try:
        return _container_stack(stack, str(os_id), [str(c) for c in components or []])
    except ContainerStackError as exc:
        raise AnsibleFilterError(f"container_stack: {exc}") from exc


class FilterModule:
    """Container build filters."""

    def filters(self) -> dict[str, Any]:
        return {"container_stack": container_stack}
