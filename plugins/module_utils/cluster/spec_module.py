# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""What every module that makes a cluster from a cluster spec (PCS, HyperPod, EKS, Batch) does first.

Each takes the spec as a file (O(path)) or inline (O(spec)), with O(stacks_dir), O(render_only) and the wait
options, documented once in the doc fragment trainstack.cluster.cluster_module; ``argument_spec`` is that
option set, so the four cannot drift apart. Each refuses the spec with its own problems, and wrong run
options, before any client exists.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.aws import wait
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.cluster_spec import (
    ClusterSpecError,
    load_file,
    normalise,
)

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
