# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Filters of the container image build (playbooks/build_container.yml, container_layer.yml): the flavour
table checked, each layer's roles, names and tags planned, and the stack as a CUDA container's layers read it.
The rules are module_utils/image's (container_flavours, container_stack), so that they are unit-tested, not
written in Jinja; the test case locks a flavour bakes are read here through module_utils/launch/locks, which
module_utils/image may not import (a layer of its own row)."""

from __future__ import annotations

import platform
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.trainstack.cluster.plugins.module_utils.image import container_flavours as flavours
from ansible_collections.trainstack.cluster.plugins.module_utils.image.container_stack import (
    ContainerStackError,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.image.container_stack import (
    container_stack as _container_stack,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.launch import locks

# The interpreter the pytorch role bakes environments with in a container (it only moves the key, which
# these checks do not read).
CONTAINER_PYTHON = "/usr/bin/python3"


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


def _unbaked(catalog: str, cases: list[str], target: str) -> dict[str, str]:
    """Case -> why an image of ``target`` bakes no environment of it (locks.baked_envs, from the index)."""
    known = set(locks.catalog_testcases(catalog))
    envs = locks.baked_envs(catalog, [c for c in cases if c in known], target, CONTAINER_PYTHON)
    return {entry["case"]: entry["reason"] for entry in envs["skipped"]}


def container_flavour_problems(
    table: Any,
    requested: Any,
    factory: Mapping[str, Any],
    catalog: str = "",
    os_id: str = "",
    arch: str = "",
) -> list[str]:
    """Every problem of the flavour table and the request (module_utils/image/container_flavours.py), and,
    with ``catalog`` and ``os_id``, the test cases of the flavours to build that have no environment for the
    containers' GPU target ``gpu-<os_id>-<arch>``. ``arch`` defaults to the controller's: buildah builds
    for the machine it runs on."""
    problems = flavours.check_request(table, requested, dict(factory or {}))
    if problems or not catalog or not os_id:
        return problems
    chain = flavours.build_chain(table, list(requested))
    target = locks.gpu_target(str(os_id), str(arch or platform.machine()))
    cases = [case for name in chain for case in table[name].get("testcases") or []]
    known = locks.catalog_testcases(str(catalog))
    unbaked = _unbaked(str(catalog), cases, target) if cases else {}
    return flavours.testcase_problems(table, chain, known, unbaked, target)


def container_source_mirror_lock(path: Any) -> dict[str, Any]:
    """``{artifacts, problems}`` of the source mirror's lock file, read once on the controller
    (module_utils/image/container_flavours.source_mirror_lock): the problems join the input checks'
    refusals, the artifacts the checked inputs."""
    return flavours.source_mirror_lock(path)


def container_layer_roles(
    table: Mapping[str, Any], requested: list[str], factory: Mapping[str, Any], host_roles: list[str]
) -> dict[str, Any]:
    """``{chain, roles}``: the flavours to build in order and the roles each layer runs."""
    try:
        return flavours.plan_roles(table, list(requested), dict(factory or {}), list(host_roles or []))
    except flavours.ContainerFlavourError as exc:
        raise AnsibleFilterError(f"container_layer_roles: {exc}") from exc


def container_layer_inputs(
    table: Mapping[str, Any],
    name: str,
    layers: Mapping[str, Any],
    keys: Mapping[str, str] | None,
    files: list[dict[str, Any]],
    root: str,
    settings: Mapping[str, Any],
    wheels: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """What layer ``name``'s key is a digest of, less the playbook's lookups (module_utils docstring)."""
    return flavours.layer_key_inputs(
        table, str(name), layers["roles"], dict(keys or {}), files or [], str(root), settings, wheels or []
    )


def container_layer_plan(
    table: Mapping[str, Any],
    layers: Mapping[str, Any],
    keys: Mapping[str, str],
    repository: str,
    stack_id: str,
) -> dict[str, Any]:
    """Each layer of ``layers`` (container_layer_roles' answer) named, tagged and placed on its parent."""
    try:
        return flavours.plan_layers(
            table, list(layers["chain"]), layers["roles"], dict(keys), str(repository), str(stack_id)
        )
    except flavours.ContainerFlavourError as exc:
        raise AnsibleFilterError(f"container_layer_plan: {exc}") from exc


class FilterModule:
    """Container build filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "container_stack": container_stack,
            "container_flavour_problems": container_flavour_problems,
            "container_source_mirror_lock": container_source_mirror_lock,
            "container_layer_roles": container_layer_roles,
            "container_layer_inputs": container_layer_inputs,
            "container_layer_plan": container_layer_plan,
        }
