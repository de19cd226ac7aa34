"""Ansible callback that writes a timeline of the playbook: when the plugin loaded, when the playbook and each
task started and ended (wall clock, seconds since the epoch), as JSON lines in $TRAINSTACK_TIMELINE.

It belongs to the launch overhead benchmark, not to the product: the benchmark turns it on with
ANSIBLE_CALLBACK_PLUGINS and ANSIBLE_CALLBACKS_ENABLED, so that each second of a launch can be put on the
task (and the file of tasks) that spent it, beside the times the benchmark observes itself (process start,
job RUNNING, job gone, process end)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: launch_timeline
type: aggregate
short_description: JSON lines of playbook and task start/end times (launch overhead benchmark)
description: Writes one JSON object per event to the file that the variable TRAINSTACK_TIMELINE names.
requirements: [enable in ansible.cfg or ANSIBLE_CALLBACKS_ENABLED]
"""


class CallbackModule(CallbackBase):
    """Timestamps, nothing else: one small write per event, so it barely moves what it measures."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "launch_timeline"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        path = os.environ.get("TRAINSTACK_TIMELINE", "")
        self._out = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115 (open for the run)
        self._write("loaded")

    def _write(self, event: str, **fields: Any) -> None:
        if self._out is None:
            return
        self._out.write(json.dumps({"t": time.time(), "event": event, **fields}) + "\n")
        self._out.flush()

    def v2_playbook_on_start(self, playbook: Any) -> None:
        self._write("playbook_start")

    def v2_playbook_on_play_start(self, play: Any) -> None:
        self._write("play_start", name=play.get_name())

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        path = task.get_path() or ""
        self._write("task_start", name=task.get_name(), file=os.path.basename(path.rsplit(":", 1)[0]))

    def v2_playbook_on_include(self, included_file: Any) -> None:
        self._write("include", file=os.path.basename(str(included_file._filename)))

    def _end(self, result: Any, status: str) -> None:
        self._write("task_end", name=result._task.get_name(), status=status)

    def v2_runner_on_ok(self, result: Any) -> None:
        self._end(result, "ok")

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._end(result, "failed")

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._end(result, "skipped")

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._end(result, "unreachable")

    def v2_playbook_on_stats(self, stats: Any) -> None:
        self._write("stats")
