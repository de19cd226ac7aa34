# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Action plugin for slurm_job: follow a job in short module runs and print a progress line between them.

A module cannot print while it runs, and Ansible's ``until``/``retries`` loop shows only "FAILED - RETRYING"
for each poll. So with ``wait: true`` this plugin runs the module once to submit (or adopt, or find) the job,
then again by job id for ``progress_interval`` seconds at a time, printing the job's state, elapsed time and
nodes through Ansible's Display after each run, until the job ends or ``timeout`` passes. Everything else
(check mode, ``wait: false``, ``state: absent``) is one plain module run.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.trainstack.cluster.plugins.module_utils.slurm.slurm_jobs import (
    JobInfo,
    progress_line,
    timeout_message,
)

display = Display()

MODULE = "trainstack.cluster.slurm_job"
_JOB_FIELDS = [f.name for f in dataclasses.fields(JobInfo)]


def _info(result: dict[str, Any]) -> JobInfo:
    """The job as a module result describes it (for the progress and timeout lines)."""
    return JobInfo(**{key: result[key] for key in _JOB_FIELDS if key in result})


def _finished(result: dict[str, Any], until: list[str]) -> bool:
    """Nothing left to follow: failure, no job, an ended job, or a state the task waits for."""
    return (
        bool(result.get("failed"))
        or not result.get("job_id")
        or bool(result.get("terminal"))
        or result.get("state") in until
    )


class ActionModule(ActionBase):
    """slurm_job with live progress while it waits."""

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        try:
            waits = boolean(args.get("wait", False), strict=False)
            if not waits or self._task.check_mode or args.get("state", "present") == "absent":
                result.update(self._module(args, task_vars))
                return result
            result.update(self._follow(args, task_vars))
            return result
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)

    def _module(self, args: dict[str, Any], task_vars: dict[str, Any] | None) -> dict[str, Any]:
        return self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)

    def _follow(self, args: dict[str, Any], task_vars: dict[str, Any] | None) -> dict[str, Any]:
        """Submit/adopt/find once, then follow by id, progress_interval at a time, to the end or timeout."""
        started = time.monotonic()
        first = self._module({**args, "wait": False}, task_vars)  # validates every option too
        until = list(args.get("until") or [])
        if _finished(first, until):
            return first
        # The module has accepted these values (positive numbers), so they convert cleanly.
        timeout = int(float(args.get("timeout", 3600)))
        interval = int(float(args.get("progress_interval", 30)))
        host = (task_vars or {}).get("inventory_hostname", "")
        name = str(args.get("name") or "")
        follow = {key: args[key] for key in ("name", "poll_interval", "until") if key in args}
        follow.update(job_id=first["job_id"], state="query", wait=True)
        latest = first
        while True:
            waited = time.monotonic() - started
            display.display(f"{host}: {progress_line(_info(latest), waited, timeout, name)}")
            remaining = timeout - (time.monotonic() - started)
            if remaining < 1:
                return self._timed_out(latest, first, timeout, name)
            follow["timeout"] = max(1, math.ceil(min(interval, remaining)))
            latest = self._module(follow, task_vars)
            if not (latest.get("failed") and latest.get("timed_out")):
                latest.update(submitted=first.get("submitted", False), changed=first.get("changed", False))
                return latest

    @staticmethod
    def _timed_out(latest: dict[str, Any], first: dict[str, Any], timeout: int, name: str) -> dict[str, Any]:
        """The task's own timeout passed: fail with the whole wait's numbers, the job left as it is."""
        # Drop the module's own error record (its slice's message), which Ansible would print instead of msg.
        latest = {key: value for key, value in latest.items() if key != "exception"}
        latest.update(
            failed=True,
            timed_out=True,
            msg=timeout_message(_info(latest), timeout, name),
            submitted=first.get("submitted", False),
            changed=first.get("changed", False),
        )
        return latest
