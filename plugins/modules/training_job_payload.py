#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Documentation of the training_job_payload action plugin (it runs on the controller; no module code)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: training_job_payload
short_description: Pack a test case's payload on the controller, reproducibly, and hash it
version_added: 0.2.0
description:
  - Runs on the controller, where the test case catalog is. Writes O(dest), a tar archive of O(source) (as
    C(.)) and of each of O(includes) (under its own name, beside the entrypoint), and returns its sha256. The
    payload is staged under that hash, so the same files make the same bytes on any controller on any day
    (members in name order, times at the epoch, owner and group root by number, no C(__pycache__)).
  - Packs in the controller's process, so this costs a launch no module run. Reports no change (the archive
    is a file of the controller's temporary directory); runs in check mode too, since the launch's later
    checks need the hash.
  - Used by the training_job role; its logic is in C(module_utils/launch/payload.py).
options:
  source:
    description: The test case's directory.
    type: path
    required: true
  includes:
    description: Packages packed beside the entrypoint, each C(directory) (its parent) and C(name).
    type: list
    elements: dict
    default: []
  dest:
    description: The archive to write (replaced whole).
    type: path
    required: true
author: trainstack maintainers (@trainstack)
"""

EXAMPLES = r"""
- name: Pack the payload
  trainstack.cluster.training_job_payload:
    source: /path/to/testcases/torchtitan/llama
    includes:
      - {directory: /path/to/testcases/common, name: trainstack_train}
    dest: /tmp/trainstack-payload-torchtitan-llama.tar
  register: packed
"""

RETURN = r"""
sha256:
  description: The archive's sha256 (hex).
  returned: success
  type: str
dest:
  description: The archive written.
  returned: success
  type: str
"""
