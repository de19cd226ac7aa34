# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The stack as a CUDA container image sees it (playbooks/build_container.yml, flavour pytorch-cuda and the
test case flavours on it).

Why: the containers' base is Debian 12, the lab's OS, for which a stack pins the lab's choices (torch's CPU
build through ``by_os``, no CUDA toolkit, no aws-ofi-nccl, no nccl-tests): the lab's nodes have no GPU. A CUDA
container of the same stack carries the GPU line instead, on the same OS. Rather than a second stack, the
container's layers read the stack with the OS added to the scope of the components they build, the OS's
``by_os`` overrides of those components dropped, and the OS taken out of ``scope.lab_os`` (so its test case
environments are baked from the GPU locks, ``gpu-<os>-<arch>``). The NCCL torch loads is then PyPI's
``nvidia-nccl-cu<major>`` wheel of torch's CUDA line, which must be the stack's NCCL: a stack where they
differ is refused here, before anything is built.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any


class ContainerStackError(ValueError):
    """A stack that no CUDA container can be built from, with the key and the rule named."""


def nccl_line_problems(stack: Mapping[str, Any]) -> list[str]:
    """Why the stack's PyTorch CUDA line and its NCCL disagree ([] when they agree): torch's CUDA build loads
    the ``nvidia-nccl-cu<major>`` wheel at ``pytorch.nccl_pin``, the image's NCCL is ``nccl.version`` for CUDA
    major ``nccl.cuda_major``; a container holding both must hold one NCCL."""
    components = stack.get("components") or {}
    pytorch, nccl = components.get("pytorch") or {}, components.get("nccl") or {}
    stack_id = stack.get("id", "?")
    if not pytorch.get("version") or not nccl.get("version"):
        return [f"stack {stack_id}: a CUDA container needs components.pytorch and components.nccl"]
    problems = []
    runtime, pin = str(pytorch.get("cuda_runtime") or ""), str(pytorch.get("nccl_pin") or "")
    if not runtime or not pin:
        problems.append(
            f"stack {stack_id}: components.pytorch.cuda_runtime ({runtime or 'unset'}) and nccl_pin "
            f"({pin or 'unset'}) must name torch's CUDA line"
        )
        return problems
    if pin != str(nccl["version"]):
        problems.append(
            f"stack {stack_id}: components.pytorch.nccl_pin is {pin} but components.nccl.version is "
            f"{nccl['version']}: torch's CUDA build would load another NCCL than the image's (rule "
            "pytorch-nccl-pin)"
        )
    major = runtime.split(".", 1)[0]
    if str(nccl.get("cuda_major", major)) != major:
        problems.append(
            f"stack {stack_id}: components.nccl.cuda_major is {nccl.get('cuda_major')} but torch's CUDA "
            f"runtime is {runtime} (rule nccl-cuda-major)"
        )
    return problems


def container_stack(stack: Mapping[str, Any], os_id: str, components: Iterable[str]) -> dict[str, Any]:
    """``stack`` with ``os_id`` in the scope of ``components`` (the ones the stack defines), their ``by_os``
    entry for ``os_id`` dropped, and ``os_id`` out of ``scope.lab_os``; the input is not changed.

    Raises ContainerStackError when the OS is not in the stack's scope, a component is not the stack's, or the
    NCCL line disagrees (:func:`nccl_line_problems`).
    """
    names = list(dict.fromkeys(str(name) for name in components))
    scope = stack.get("scope") or {}
    if os_id not in (scope.get("os") or []):
        raise ContainerStackError(
            f"stack {stack.get('id', '?')}: scope.os ({scope.get('os')}) has no {os_id}, the container's OS"
        )
    known = stack.get("components") or {}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ContainerStackError(
            f"stack {stack.get('id', '?')} has no component {', '.join(unknown)} "
            f"(it has {', '.join(sorted(known))})"
        )
    problems = nccl_line_problems(stack)
    if problems:
        raise ContainerStackError("; ".join(problems))
    out = copy.deepcopy(dict(stack))
    out["scope"] = {**out.get("scope", {}), "lab_os": [o for o in scope.get("lab_os") or [] if o != os_id]}
    for name in names:
        component = out["components"][name]
        component["os"] = list(dict.fromkeys([*(component.get("os") or []), os_id]))
        by_os = {k: v for k, v in (component.get("by_os") or {}).items() if k != os_id}
        if by_os:
            component["by_os"] = by_os
        else:
            component.pop("by_os", None)
    return out
