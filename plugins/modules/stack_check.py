#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module: refuse a stack that breaks a compatibility rule, before a build installs anything."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stack_check
short_description: Check a training stack against the compatibility rules
description:
  - Runs every rule of C(stacks/rules.yml) against every OS x architecture x instance family in the stack's
    scope (or one OS/architecture) and fails, naming each broken rule, the targets it breaks on and its
    citation.
  - Before any rule, the stack is checked against its schema (module_utils/stack/stack_schema.py, published as
    C(stacks/schema/stack.schema.json)); unknown or misspelt keys, wrong types and null sections fail with the
    file and the dotted path of the key.
  - Also reports (without failing) every artifact that has no known sha256 in the stack or its lock file, and
    lists the artifacts the stack accepts unverified (C(verify=false)) with their reasons.
  - "Pure controller-side computation; run it with C(delegate_to: localhost) or in a
    C(hosts: localhost) play."
version_added: 0.1.0
author: trainstack maintainers (@trainstack)
options:
  stack:
    description: The parsed stack file (C(stacks/<id>.yml)).
    type: dict
    required: true
  rules:
    description: The parsed rule list (C(rules) of C(stacks/rules.yml)).
    type: list
    elements: dict
    required: true
  path:
    description: The stack file's path, named in every schema error (default C(stack <id>)).
    type: str
  os:
    description: Only check this OS id (C(ubuntu-24.04), C(amzn-2023), C(debian-12)).
    type: str
  arch:
    description: Only check this architecture (C(x86_64), C(aarch64)).
    type: str
  lock:
    description: The parsed lock file (C(stacks/locks/<id>.lock.json)), so locked artifacts are not reported.
    type: dict
  fail_on_error:
    description: Fail when a rule is broken (set false to only report).
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Check the stack before building
  trainstack.cluster.stack_check:
    stack: "{{ lookup('trainstack.cluster.stack', part='document') }}"
    rules: "{{ lookup('trainstack.cluster.stack', part='rules') }}"
    os: ubuntu-24.04
    arch: x86_64
"""

RETURN = r"""
report:
  description: ok, errors (rule, message, citation, target), notes and the targets checked.
  returned: always
  type: dict
text:
  description: The report as terminal lines.
  returned: always
  type: str
versions:
  description: Component versions for O(os)/O(arch).
  returned: when os and arch are given
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.trainstack.cluster.plugins.module_utils.stack.stack_matrix import (
    StackError,
    check,
    format_report,
    versions,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "stack": {"type": "dict", "required": True},
            "path": {"type": "str"},
            "rules": {"type": "list", "elements": "dict", "required": True},
            "os": {"type": "str"},
            "arch": {"type": "str"},
            "lock": {"type": "dict"},
            "fail_on_error": {"type": "bool", "default": True},
        },
        required_together=[("os", "arch")],
        supports_check_mode=True,
    )
    params = module.params
    try:
        report = check(
            params["stack"],
            params["rules"],
            params["os"],
            params["arch"],
            params["lock"],
            source=params["path"],
        )
    except StackError as exc:
        module.fail_json(msg=f"stack is invalid:\n{exc}")
    result = {"changed": False, "report": report.as_dict(), "text": format_report(report)}
    if params["os"]:
        result["versions"] = versions(params["stack"], params["os"], params["arch"])
    if not report.ok and params["fail_on_error"]:
        module.fail_json(msg=f"stack {report.stack_id} is rejected:\n{result['text']}", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
