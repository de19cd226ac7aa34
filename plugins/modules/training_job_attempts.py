#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Documentation of the training_job_attempts action plugin (it runs on the controller; no module code)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: training_job_attempts
short_description: Read a training job's attempts from its fetched log and save them beside it
version_added: 0.2.0
description:
  - Runs on the controller, where the launch has fetched the job's log. Every attempt of a requeueable job is
    in its log (the batch script's C(TRAINSTACK_ATTEMPT) line, the test case's metric lines after it, and a
    C(TRAINSTACK_ATTEMPT_STOP) line when the script refused to run it again); the attempts go to O(dest) as
    JSON, written only when they differ from what it holds, and a log without attempts writes nothing.
  - Parsing and writing happen in the controller's process, so this costs a launch no module run.
  - Used by the training_job role; its logic is in C(module_utils/launch/output.py).
options:
  log:
    description: The job's log on the controller.
    type: path
    required: true
  dest:
    description: Where to write the attempts (JSON, mode C(0644)); its directory must exist.
    type: path
    required: true
notes:
  - Supports check mode (it reads the log and writes nothing).
author: trainstack maintainers (@trainstack)
"""

EXAMPLES = r"""
- name: Save the attempts beside the log
  trainstack.cluster.training_job_attempts:
    log: results/fsdp-tiny-20261207-101500/job.log
    dest: results/fsdp-tiny-20261207-101500/attempts.json
  register: attempts
"""

RETURN = r"""
attempts:
  description:
    - Every attempt, in order (C(attempt), C(job_id), C(nodes), C(checkpoint), C(first_step), C(last_step),
      C(steps), and C(stopped) when the script refused it).
  returned: always
  type: list
  elements: dict
dest:
  description: The file written or kept (empty when the log holds no attempt).
  returned: always
  type: str
"""
