# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""What every module that makes a cluster from a cluster spec (PCS, HyperPod, EKS, Batch) does first.

Each takes the spec as a file (O(path)) or inline (O(spec)), with O(stacks_dir), and refuses it with the
spec's own problems before any client exists; those that wait take O(wait_timeout) and O(poll_interval) and
O(render_only), whose rules are the same everywhere.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.cluster_spec import (
    ClusterSpecError,
    load_file,
    normalise,
)


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
    for key in ("wait_timeout", "poll_interval"):
        if params[key] <= 0:
            module.fail_json(msg=f"{key}: must be more than 0 seconds (got {params[key]})")
    if params["render_only"] and params["state"] == "absent":
        module.fail_json(msg="render_only: only with state=present (there is nothing to render for absent)")
