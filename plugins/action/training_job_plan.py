# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Action plugin for training_job_plan: check a training request and plan its launch on the controller.

It runs where the test case catalog, the locks and the instance catalog are (the controller), reads nothing on
the launch host, and changes nothing, so it behaves the same in check mode. Every rule lives in
module_utils/launch/plan.py; this plugin only gathers its inputs and turns problems into one refusal.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import yaml
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.trainstack.cluster.plugins.module_utils.catalog.instance_catalog import (
    default as catalog_default,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.files import strict_yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.inventory.ec2_cluster_model import safe_group
from ansible_collections.trainstack.cluster.plugins.module_utils.launch import locks, plan
from ansible_collections.trainstack.cluster.plugins.module_utils.launch.names import close_matches

PREFIX = "training_job_"
# What the role sets itself (never a caller's input, but visible under the prefix on a second launch).
ROLE_RESULTS = ("training_job_summary", "training_job_result")
ARGS = ("request", "catalog", "argument_specs", "image", "image_unchecked", "node")
NOTHING = "Nothing was submitted."


def known_variables(argument_specs: str) -> list[str]:
    """Every option of the role's argument specification, and the two results the role sets."""
    spec = strict_yaml.load(argument_specs)
    return list(spec["argument_specs"]["main"]["options"]) + list(ROLE_RESULTS)


def catalog_testcases(catalog: str) -> list[str]:
    """The test cases of the catalog (module_utils/launch/locks.py: an image build lists them alike)."""
    return locks.catalog_testcases(catalog)


def read_manifest(catalog: str, testcase: str) -> dict[str, Any]:
    return strict_yaml.load(os.path.join(catalog, testcase, "testcase.yml"))


def instance_entry(name: str) -> dict[str, Any]:
    """The instance type's merged catalog entry; empty for none or an unknown one (refused by the checks)."""
    catalog = catalog_default()
    return catalog.get(name, {}).as_dict() if name and name in catalog.names() else {}


def refusals(
    request: Mapping[str, Any], catalog: str, known: list[str], node: Mapping[str, Any] | None = None
) -> tuple[str, dict[str, Any] | None]:
    """The first refusal of the request (or ''), and the manifest once the request may read it.

    ``node`` is what the role read about the nodes (OS, architecture, baked environments, the torch of
    training_job_python): see module_utils/launch/plan.py.
    """
    unknown = plan.unknown_variables([name for name in request if name.startswith(PREFIX)], known)
    if unknown:
        return (
            f"Unknown variable(s): {close_matches(unknown, known, PREFIX)}. The role's variables are listed "
            "in "
            f"its README. {NOTHING}",
            None,
        )
    testcase = request["training_job_testcase"]
    cases = catalog_testcases(catalog)
    if testcase not in cases:
        required = " (training_job_testcase is required)" if not testcase else ""
        return f"Unknown test case '{testcase}'{required}. Known: {', '.join(cases)}. {NOTHING}", None
    problems = plan.input_problems(request, catalog_default().names())
    if problems:
        return f"{' '.join(problems)} {NOTHING}", None
    try:
        manifest = read_manifest(catalog, testcase)
    except yaml.YAMLError as err:
        return f"Cannot launch {testcase}: its testcase.yml is not valid YAML: {err} {NOTHING}", None
    problems = plan.request_problems(
        request, manifest, catalog, instance_entry(request["training_job_instance_type"]), node or {}
    )
    if problems:
        return f"Cannot launch {testcase}: {' '.join(problems)} {NOTHING}", None
    return "", manifest


def named_cluster_storage(task_vars: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``cluster_storage`` of the cluster that ``-e cluster=<name>`` names (its hosts in the inventory's
    ``cluster_<name>`` group), or nothing.

    Why: the kubernetes launcher runs on the controller (``launch_host=localhost``), which is no host of the
    cluster; the cluster's EKS nodes are, and carry its storage defaults (the ec2_cluster inventory's
    ``eks`` kind). Every host of a cluster holds the same value (the inventory sets it on that group)."""
    cluster = task_vars.get("cluster")
    if not isinstance(cluster, str) or not cluster:
        return {}
    hosts = (task_vars.get("groups") or {}).get(f"cluster_{safe_group(cluster)}") or []
    hostvars = task_vars.get("hostvars") or {}
    for host in hosts:
        found = (hostvars.get(host) or {}).get("cluster_storage") if host in hostvars else None
        if found:
            return found
    return {}


def with_cluster_storage(request: Mapping[str, Any], task_vars: Mapping[str, Any]) -> dict[str, Any]:
    """The request, its empty ``training_job_cluster_storage`` taken from the host's ``cluster_storage``, else
    from the named cluster's hosts (named_cluster_storage).

    Why here and not as the role default's expression: the inventory sets ``cluster_storage`` on the hosts
    of a spec'd cluster only, and the plan's checks should see a plain mapping (or its absence), never a
    template that resolves differently per host.
    """
    out = dict(request)
    if not out.get("training_job_cluster_storage"):
        out["training_job_cluster_storage"] = (
            task_vars.get("cluster_storage") or named_cluster_storage(task_vars) or {}
        )
    return out


class ActionModule(ActionBase):
    """Checks, then the plan (see module_utils/launch/plan.py); never runs anything on the target."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _VALID_ARGS = frozenset(ARGS)

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = self._task.args
        missing = [name for name in ARGS[:3] if name not in args]
        if missing:
            raise AnsibleActionFail(f"training_job_plan needs {', '.join(missing)}")
        request, catalog = with_cluster_storage(args["request"], task_vars or {}), str(args["catalog"])
        node = dict(args.get("node") or {})
        refusal, manifest = refusals(request, catalog, known_variables(str(args["argument_specs"])), node)
        if refusal:
            return {**result, "failed": True, "msg": refusal}
        if manifest is None:  # refusals() gives a manifest whenever it refuses nothing
            raise AnsibleActionFail("training_job_plan: no manifest for an accepted request")
        instance = instance_entry(request["training_job_instance_type"])
        image = dict(args.get("image") or {})
        problems = plan.image_problems(request, image, instance) if "image" in args else []
        result.update(
            changed=False,
            image_problems=problems,
            plan=plan.launch_plan(
                request, manifest, catalog, instance, image, os.environ.get("TMPDIR", ""), node
            ),
        )
        if problems and not plan.as_bool(args.get("image_unchecked", False)):
            return {**result, "failed": True, "msg": f"{' '.join(problems)} {NOTHING}"}
        return result
