# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""What every module that makes a cluster from a cluster spec (PCS, HyperPod, EKS, Batch) does first.

Each takes the spec as a file (O(path)) or inline (O(spec)), with O(stacks_dir), O(render_only) and the wait
options, documented once in the doc fragment trainstack.cluster.cluster_module; ``argument_spec`` is that
option set, so the four cannot drift apart. Each refuses the spec with its own problems, and wrong run
options, before any client exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ansible_collections.trainstack.cluster.plugins.module_utils.aws import wait
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.cluster_spec import (
    ClusterSpecError,
    load_file,
    normalise,
)

T = TypeVar("T")

# The AnsibleAWSModule arguments of the spec's two forms.
SPEC_RULES: dict[str, Any] = {
    "required_one_of": [("path", "spec")],
    "mutually_exclusive": [("path", "spec")],
}


def argument_spec(own: dict[str, Any], **defaults: Any) -> dict[str, Any]:
    """The shared options (state, the spec, render_only, the waits), then the module's ``own``; ``defaults``
    replaces a shared option's default where the module's service differs (Batch's shorter wait_timeout)."""
    shared: dict[str, Any] = {
        "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        "path": {"type": "path"},
        "spec": {"type": "dict"},
        "stacks_dir": {"type": "path"},
        "render_only": {"type": "bool", "default": False},
        **wait.argument_spec(),
    }
    for key, value in defaults.items():
        shared[key] = {**shared[key], "default": value}
    return {**shared, **own}


def load_spec(module: Any) -> dict[str, Any]:
    """The normalised spec from O(path) or O(spec); an invalid one fails the module naming each problem."""
    params = module.params
    try:
        if params["path"]:
            return load_file(params["path"], stacks=params["stacks_dir"])
        return normalise(params["spec"], "spec", stacks=params["stacks_dir"])
    except ClusterSpecError as exc:
        module.fail_json(msg=f"cluster spec is invalid:\n{exc}", problems=exc.problems)
    raise AssertionError("unreachable")  # pragma: no cover - fail_json exits


def check_run_params(module: Any) -> None:
    """Waits need a positive timeout and interval; O(render_only) renders what state=present would send."""
    params = module.params
    for problem in wait.problems(params):
        module.fail_json(msg=problem)
    if params["render_only"] and params["state"] == "absent":
        module.fail_json(msg="render_only: only with state=present (there is nothing to render for absent)")


def cluster_module(
    name: str, argument_spec: dict[str, Any], present_needs: tuple[str, ...]
) -> tuple[Any, dict]:
    """The module and its normalised spec, in the order every cluster module takes them: the run options
    checked, then the spec, both before any client exists. ``present_needs`` are the options state=present
    requires besides the spec."""
    try:
        from ansible_collections.amazon.aws.plugins.module_utils.modules import AnsibleAWSModule
    except ImportError:  # pragma: no cover - amazon.aws is a dependency of this collection
        from ansible.module_utils.basic import AnsibleModule

        AnsibleModule(argument_spec={}, bypass_checks=True).fail_json(
            msg=f"trainstack.cluster.{name} needs the amazon.aws collection (module_utils): install it"
        )
        raise AssertionError("unreachable") from None  # fail_json exits
    module = AnsibleAWSModule(
        argument_spec=argument_spec,
        required_if=[("state", "present", present_needs)],
        supports_check_mode=True,
        **SPEC_RULES,
    )
    check_run_params(module)
    return module, load_spec(module)


def foundation(module: Any) -> dict[str, Any]:
    """The foundation record's values that are set: the foundation writes '' (or an empty list) for what it
    did not make, which every renderer reads as absent."""
    return {
        key: value
        for key, value in (module.params["foundation"] or {}).items()
        if value not in (None, "", [])
    }


def rendered(
    module: Any, service: str, errors: tuple[type, type], make: Callable[[], T], what: str = "cluster"
) -> T:
    """``make()`` (render, then validate against the service's request model), or the module failed: a
    render error lists each problem of the spec, a request error names the API operation it breaks."""
    render_error, request_error = errors
    try:
        return make()
    except render_error as exc:
        module.fail_json(msg=f"{service} cannot make this {what}:\n{exc}", problems=exc.problems)
    except request_error as exc:
        module.fail_json(msg=str(exc), operation=exc.operation)
    raise AssertionError("unreachable")  # pragma: no cover - fail_json exits


def keep_rendered(module: Any, result: dict[str, Any], requests: dict[str, Any], service: str) -> None:
    """Put the rendered requests in the result and warn of what the spec says that they cannot carry; with
    O(render_only), that result is the whole answer and the module exits before any client exists."""
    result.update(requests=requests, not_rendered=requests.pop("not_rendered"))
    for line in result["not_rendered"]:
        module.warn(f"not in the {service} requests: {line}")
    if module.params["render_only"]:
        module.exit_json(**result)
