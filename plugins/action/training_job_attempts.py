# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Action plugin training_job_attempts: read a job's attempts from its fetched log and save them beside it.

Both files are on the controller. The launch used a ``set_fact`` and a ``copy`` for this; ``copy`` runs two
modules (a ``stat`` and the copy) in Python processes of their own, most of a second after every job. Here
the parse and the write happen in the controller's process; the parse is module_utils/launch/output.py's.
"""

from __future__ import annotations

import json
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.trainstack.cluster.plugins.module_utils.files.atomic import write_text_atomic
from ansible_collections.trainstack.cluster.plugins.module_utils.launch import output

ARGS = ("log", "dest")


def attempts_text(attempts: list[dict]) -> str:
    """The file's text: as Ansible's to_nice_json writes it, one newline at the end."""
    return json.dumps(attempts, indent=4, sort_keys=True, separators=(",", ": "), ensure_ascii=False) + "\n"


def write_if_changed(path: str, text: str) -> bool:
    """Write ``text`` to ``path`` (mode 0644) unless it holds exactly that; whole or not at all."""
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text:
                return False
    except FileNotFoundError:
        pass
    write_text_atomic(path, text, 0o644)
    return True


class ActionModule(ActionBase):
    """Parse the log, write attempts.json when there is an attempt; runs nothing on the target."""

    TRANSFERS_FILES = False
    _supports_check_mode = True
    _VALID_ARGS = frozenset(ARGS)

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        missing = [name for name in ARGS if not self._task.args.get(name)]
        if missing:
            raise AnsibleActionFail(f"training_job_attempts needs {', '.join(missing)}")
        # Relative paths as fetch, which wrote the log, resolves them (against the playbook's directory).
        log, dest = (self._loader.path_dwim(str(self._task.args[name])) for name in ARGS)
        try:
            with open(log, encoding="utf-8", errors="replace") as handle:
                attempts = output.job_attempts(handle.read())
        except OSError as err:
            raise AnsibleActionFail(f"training_job_attempts: cannot read the job's log {log}: {err}") from err
        changed = False
        if attempts and not self._task.check_mode:
            try:
                changed = write_if_changed(dest, attempts_text(attempts))
            except OSError as err:
                raise AnsibleActionFail(f"training_job_attempts: cannot write {dest}: {err}") from err
        return {**result, "changed": changed, "attempts": attempts, "dest": dest if attempts else ""}
