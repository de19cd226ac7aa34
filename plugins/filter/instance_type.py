# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Filters that answer from the instance catalog (stacks/instance_types.yml) for roles and playbooks.

Why filters: the training_job, node_health, nvidia_driver roles and the acceptance playbooks each need a few
facts of one instance type; asking module_utils/catalog/instance_catalog keeps one table and one set of rules
instead of a lookup of a file per consumer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.trainstack.cluster.plugins.module_utils.catalog.instance_catalog import (
    CatalogError,
    default,
)


def instance_type(name: str, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The merged entry of one instance type; `given` fills facts the catalog cannot know (a local GPU)."""
    try:
        return default().get(str(name), dict(given or {})).as_dict()
    except CatalogError as err:
        raise AnsibleFilterError(str(err)) from err


def instance_type_health(name: str, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """node_health.py's table for one node: its row under `types`, the overridable keys as `defaults`."""
    try:
        row = default().get(str(name), dict(given or {})).health_expectations()
    except CatalogError as err:
        raise AnsibleFilterError(str(err)) from err
    return {"defaults": dict(row), "types": {str(name): row}}


def instance_family(name: str) -> dict[str, Any]:
    """Family-level facts (GPU generation, NVSwitch, ...) of an instance family such as p5 or p6-b200."""
    try:
        return default().family_facts(str(name))
    except CatalogError as err:
        raise AnsibleFilterError(str(err)) from err


def instance_catalog_names(kind: str) -> list[str]:
    """Every known instance type (`types`) or family (`families`), sorted, for validation messages."""
    if kind == "types":
        return default().names()
    if kind == "families":
        return default().families()
    raise AnsibleFilterError(f"instance_catalog_names: input must be 'types' or 'families' (got {kind!r})")


class FilterModule:
    """trainstack.cluster instance catalog filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "instance_type": instance_type,
            "instance_type_health": instance_type_health,
            "instance_family": instance_family,
            "instance_catalog_names": instance_catalog_names,
        }
