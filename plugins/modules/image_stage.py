#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module: the local image build's stage reuse, on the controller (the build container's host)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: image_stage
short_description: Resume the local image build after its reused stages, and snapshot each stage it runs
description:
  - "Runs on the controller that holds the LXC build container (C(delegate_to: localhost)), for
    C(playbooks/build_image.yml) when C(make image-local) planned the build's stages
    (C(scripts/image_stages.py))."
  - "With O(state=resumed), reads the plan and the file the LXC template wrote beside the container's config
    (C(trainstack-rootfs-from): the snapshot the root filesystem came from, or C(base)), checks that the plan
    was made for the roles and variables of this build, and returns how many stages are reused. A plan made
    for other roles or variables, or a root filesystem from a snapshot the plan does not name, fails the build
    before any stage runs; a snapshot that did not extract (the template fell back to the base) makes every
    stage run."
  - With O(state=captured), writes the snapshot of stage O(index) from the container's root filesystem (the
    bind-mounted caches left out) under the plan's cache directory, then prunes the directory to the plan's
    C(keep) snapshots, least recently used first. A snapshot that cannot be written is reported, not fatal
    (the image itself does not depend on it).
version_added: 0.3.0
author: trainstack maintainers (@trainstack)
options:
  plan:
    description: The stage plan (JSON) C(scripts/image_stages.py) wrote.
    type: path
    required: true
  container:
    description: The build container's name (the play's host).
    type: str
    required: true
  container_dir:
    description: The container's directory (its config and C(trainstack-rootfs-from)); default
      C(<lxc-config lxc.lxcpath>/<container>).
    type: path
  state:
    description: C(resumed) checks the plan and returns the stages reused and to run; C(captured) snapshots
      one.
    type: str
    choices: [captured, resumed]
    default: resumed
  applied:
    description: With O(state=resumed), the roles this build applies, in order (C(image_prepare_plan.apply)).
    type: list
    elements: str
    default: []
  settings:
    description: With O(state=resumed), the build's variables the keys were made from (flavour, stack,
      artifact_mirror_url, host_ca_certs, pytorch_wheelhouse, pytorch_testcases); each must equal the plan's.
    type: dict
    default: {}
  index:
    description: With O(state=captured), the stage to snapshot (1-based, the plan's C(index)).
    type: int
"""

EXAMPLES = r"""
- name: Find where this build resumes
  trainstack.cluster.image_stage:
    plan: /srv/build/image/local-slurm-gpu/stages.json
    container: ts-image-build
    applied: [base, slurm, pytorch]
    settings: {flavour: slurm-gpu, stack: ts-2026.12}
  delegate_to: localhost
  register: resume

- name: Snapshot stage 2
  trainstack.cluster.image_stage:
    plan: /srv/build/image/local-slurm-gpu/stages.json
    container: ts-image-build
    state: captured
    index: 2
  delegate_to: localhost
"""

RETURN = r"""
after:
  description: The number of stages reused (0 when every stage runs).
  returned: when O(state=resumed)
  type: int
reused:
  description: The roles whose stages are reused, in order.
  returned: when O(state=resumed)
  type: list
  elements: str
run:
  description: The roles whose stages run, in order.
  returned: when O(state=resumed)
  type: list
  elements: str
note:
  description: Why the build starts earlier than the plan said (a snapshot that did not extract); empty
    otherwise.
  returned: when O(state=resumed)
  type: str
snapshot:
  description: The snapshot written (O(state=captured)) or resumed from (O(state=resumed)); empty when the
    build starts from the base.
  returned: always
  type: str
record:
  description: The snapshot's record (key, role, index, flavour, size, sha256, seconds, created).
  returned: when O(state=captured) and the snapshot was written
  type: dict
pruned:
  description: Files removed from the stages directory to keep the plan's number of snapshots.
  returned: when O(state=captured)
  type: list
  elements: str
warning:
  description: Why no snapshot was written; empty when one was.
  returned: when O(state=captured)
  type: str
"""

import json
import os
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.trainstack.cluster.plugins.module_utils.image import stage_cache as sc


def _container_dir(module: AnsibleModule) -> str:
    """The container's directory: the option, else LXC's container path and the name."""
    if module.params["container_dir"]:
        return str(module.params["container_dir"])
    proc = subprocess.run(["lxc-config", "lxc.lxcpath"], capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        module.fail_json(msg=f"lxc-config lxc.lxcpath failed ({proc.stderr.strip()}); set container_dir")
    return os.path.join(proc.stdout.strip(), module.params["container"])


def _load_plan(module: AnsibleModule) -> dict:
    """The plan file, or a failure naming it."""
    try:
        with open(module.params["plan"], encoding="utf-8") as handle:
            plan = json.load(handle)
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"image_stage_plan={module.params['plan']}: cannot be read as JSON ({exc})")
    problems = sc.plan_problems(plan)
    if problems:
        module.fail_json(msg="; ".join(problems))
    return plan


def _resumed(module: AnsibleModule, plan: dict, folder: str) -> None:
    marker_path = os.path.join(folder, sc.ROOTFS_MARKER)
    marker = None
    if os.path.isfile(marker_path):
        with open(marker_path, encoding="utf-8") as handle:
            marker = handle.read().strip()
    try:
        point = sc.resume_point(plan, marker, module.params["applied"], module.params["settings"])
    except sc.StageCacheError as exc:
        module.fail_json(msg=str(exc))
    if point["after"] > 0:
        sc.mark_used(plan["cache_dir"], plan["stages"][point["after"] - 1]["key"])
    module.exit_json(changed=False, **point)


def _captured(module: AnsibleModule, plan: dict, folder: str) -> None:
    index = module.params["index"]
    stages = plan["stages"]
    if index is None or not 1 <= index <= len(stages):
        module.fail_json(msg=f"image_stage index={index!r} is out of range 1..{len(stages)}")
    stage = stages[index - 1]
    paths = sc.snapshot_paths(plan["cache_dir"], stage["key"])
    if module.check_mode:
        module.exit_json(changed=True, snapshot=str(paths.tar), pruned=[], warning="")
    with open(os.path.join(folder, "config"), encoding="utf-8") as handle:
        rootfs = sc.rootfs_from_config(handle.read())
    record, warning = None, ""
    try:
        record = sc.capture(rootfs, plan["cache_dir"], stage, plan["flavour"])
    except (OSError, sc.StageCacheError) as exc:
        warning = f"no snapshot of stage {index} ({stage['role']}): {exc}"
    resumed_from = plan["stages"][plan["resume"]["after"] - 1]["key"] if plan["resume"]["after"] else ""
    pruned = sc.prune(plan["cache_dir"], int(plan["keep"]), protect=[resumed_from] if resumed_from else [])
    if warning:
        module.warn(warning)
    module.exit_json(
        changed=record is not None,
        snapshot=str(paths.tar),
        record=record or {},
        pruned=pruned,
        warning=warning,
    )


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "plan": {"type": "path", "required": True},
            "container": {"type": "str", "required": True},
            "container_dir": {"type": "path"},
            "state": {"type": "str", "choices": ["captured", "resumed"], "default": "resumed"},
            "applied": {"type": "list", "elements": "str", "default": []},
            "settings": {"type": "dict", "default": {}},
            "index": {"type": "int"},
        },
        supports_check_mode=True,
    )
    plan = _load_plan(module)
    folder = _container_dir(module)
    if module.params["state"] == "resumed":
        _resumed(module, plan, folder)
    _captured(module, plan, folder)


if __name__ == "__main__":
    main()
