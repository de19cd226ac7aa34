# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Action plugin training_job_payload: pack a test case's payload on the controller and hash it.

The launch ran ``tar`` and ``sha256sum`` through a ``command`` module on localhost for this, a Python process
of its own on every launch. The archive is now written in the controller's process
(module_utils/launch/payload.py), reproducibly, so that its hash names its content.
"""

from __future__ import annotations

import os
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.trainstack.cluster.plugins.module_utils.launch import payload

ARGS = ("source", "includes", "dest")


def include_pairs(includes: Any) -> list[tuple[str, str]]:
    """The plan's payload_includes as (directory, name) pairs; anything else is the role's bug, named."""
    if not isinstance(includes, list):
        raise AnsibleActionFail(
            f"training_job_payload: includes must be a list, got {type(includes).__name__}"
        )
    pairs = []
    for item in includes:
        if not isinstance(item, dict) or not item.get("directory") or not item.get("name"):
            raise AnsibleActionFail(
                f"training_job_payload: each include needs a directory and a name, got {item!r}"
            )
        pairs.append((str(item["directory"]), str(item["name"])))
    return pairs


class ActionModule(ActionBase):
    """Pack and hash; runs nothing on the target, and runs in check mode too (it writes only the archive)."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _VALID_ARGS = frozenset(ARGS)

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = self._task.args
        if not args.get("source") or not args.get("dest"):
            raise AnsibleActionFail("training_job_payload needs source and dest")
        source, dest = str(args["source"]), str(args["dest"])
        if not os.path.isdir(source):
            raise AnsibleActionFail(f"training_job_payload: the test case directory {source} does not exist")
        pairs = include_pairs(args.get("includes") or [])
        try:
            sha256 = payload.write_payload(source, pairs, dest)
        except OSError as err:
            raise AnsibleActionFail(f"training_job_payload: cannot pack {source} into {dest}: {err}") from err
        return {**result, "changed": False, "sha256": sha256, "dest": dest}
