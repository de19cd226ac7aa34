# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Lookup that answers what the training stack pins for a host; every role reads the stack through it."""

from __future__ import annotations

DOCUMENTATION = r"""
name: stack
author: trainstack maintainers (@trainstack)
short_description: A training stack's pins for one host, with the lock file's checksums
description:
  - Returns, for each component named, what the stack pins for the host's OS and architecture
    (C(stacks/<id>.yml) with C(by_os) merged and other architectures' artifacts dropped). An artifact the
    stack leaves without a sha256 gets the one recorded for the same URL in C(stacks/locks/<id>.lock.json)
    (and C(sha256_from=lock)); a stack digest always wins.
  - A component the stack defines but does not pin for this OS/arch gives an empty mapping (the role skips);
    a name that is no component of the stack is an error naming it. With no component named, one mapping of
    every pin.
  - The stack is C(trainstack_stack) (an id), else the current stack named in C(stacks/current).
    The OS and architecture are C(trainstack_os)/C(trainstack_arch), else the host's facts.
  - O(part) asks for something else than pins, for the few callers that need a whole stack (the image build,
    the stack check, the EFA job environment).
options:
  _terms:
    description:
      - Component names (O(part=pin)), or PyTorch build variants (O(part=requirements)); none for other parts.
    type: list
    elements: str
    required: false
  stack:
    description:
      - Stack id (C(stacks/<id>.yml)); empty means the current stack (C(stacks/current)).
      - A parsed stack mapping is accepted too, for a test scenario that widens a shipped stack's scope.
      - C(trainstack_stack_document), where set, wins over C(trainstack_stack) (an extra var that a play
        cannot change); a CUDA container's layers set it to the stack document they read (filter
        C(container_stack)).
    type: raw
    vars:
      - name: trainstack_stack
      - name: trainstack_stack_document
  os:
    description: Stack OS id (C(ubuntu-22.04), C(debian-12), C(amzn-2023)); default from the host's facts.
    type: str
    vars:
      - name: trainstack_os
  arch:
    description: Architecture (C(x86_64), C(aarch64)); default C(ansible_facts.architecture).
    type: str
    vars:
      - name: trainstack_arch
  part:
    description:
      - >-
        C(pin) the components' pins for the host; C(versions) the mapping component to version for the host;
        C(unverified) the host's artifacts the stack accepts unchecked (C(verify=false) with its reason);
        C(id) the resolved stack id; C(document) the validated stack file; C(rules) the rules of
        C(stacks/rules.yml); C(lock) the parsed lock file; C(requirements) the path of
        C(locks/<id>.pytorch-<variant>.txt) for each variant named.
    type: str
    default: pin
    choices: [pin, versions, unverified, id, document, rules, lock, requirements]
  stacks_dir:
    description: Directory of stack files; default the collection's C(stacks/) (tests point it elsewhere).
    type: path
    vars:
      - name: trainstack_stacks_dir
"""

EXAMPLES = r"""
- name: CUDA's pin for this host under the play's stack (trainstack_stack) or the current one
  ansible.builtin.set_fact:
    __cuda_stack: "{{ lookup('trainstack.cluster.stack', 'cuda') }}"

- name: What the host's image records, for a named stack
  ansible.builtin.debug:
    msg: "{{ lookup('trainstack.cluster.stack', part='versions', stack='ts-2025.12') }}"

- name: The whole stack and its rules, for filters that take a stack
  ansible.builtin.set_fact:
    __env: >-
      {{ lookup('trainstack.cluster.stack', part='document')
         | trainstack.cluster.stack_environment(lookup('trainstack.cluster.stack', part='rules'),
           'ubuntu-22.04', 'x86_64', 'p5') }}
"""

RETURN = r"""
_raw:
  description:
    - One element per component named (its pin, or C({}) where the stack pins none for this host), or one
      element for parts that take no terms (mapping, list or string).
  type: list
  elements: raw
"""

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.trainstack.cluster.plugins.module_utils.stack import stack_resolver as sr
from ansible_collections.trainstack.cluster.plugins.module_utils.stack.stack_matrix import (
    StackError,
    unverified_artifacts,
    versions,
)

_HOST_PARTS = {"pin", "versions", "unverified"}
_TERM_PARTS = {"pin", "requirements"}


class LookupModule(LookupBase):
    """Resolve the stack once per call and answer the part asked for."""

    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> list[Any]:
        self.set_options(var_options=variables, direct=kwargs)
        part = self.get_option("part")
        if terms and part not in _TERM_PARTS:
            raise AnsibleLookupError(f"stack: part={part} takes no terms, got {list(terms)}")
        try:
            return self._answer(part, [str(t) for t in terms], variables or {})
        except StackError as exc:
            raise AnsibleLookupError(f"stack: {exc}") from exc

    def _answer(self, part: str, terms: list[str], variables: Mapping[str, Any]) -> list[Any]:
        directory = sr.stacks_dir(self.get_option("stacks_dir"))
        stack = sr.load_stack(directory, self.get_option("stack"))
        stack_id = str(stack["id"])
        simple: dict[str, Callable[[], Any]] = {
            "id": lambda: stack_id,
            "document": lambda: stack,
            "rules": lambda: sr.load_rules(directory),
            "lock": lambda: sr.load_lock(directory, stack_id),
        }
        if part in simple:
            return [simple[part]()]
        if part == "requirements":
            return [sr.requirements_file(directory, stack_id, variant) for variant in terms]
        os_id, arch = self._host(variables)
        if part == "versions":
            return [versions(stack, os_id, arch)]
        if part == "unverified":
            return [unverified_artifacts(stack, os_id, arch)]
        return self._pins(stack, directory, terms, os_id, arch)

    def _host(self, variables: Mapping[str, Any]) -> tuple[str, str]:
        """OS id and architecture: the options (trainstack_os/trainstack_arch) where set, else the facts."""
        facts = variables.get("ansible_facts") or {}
        os_id = self.get_option("os") or sr.os_id(facts)
        arch = self.get_option("arch") or facts.get("architecture")
        if not arch:
            raise StackError(
                "arch: no trainstack_arch and no ansible_facts.architecture (gather facts first)"
            )
        return str(os_id), str(arch)

    @staticmethod
    def _pins(stack: dict[str, Any], directory: Path, terms: list[str], os_id: str, arch: str) -> list[Any]:
        unknown = [t for t in terms if t not in stack["components"]]
        if unknown:
            raise StackError(
                f"stack {stack['id']} has no component {', '.join(unknown)} "
                f"(it has {', '.join(sorted(stack['components']))})"
            )
        every = sr.pins(stack, sr.load_lock(directory, str(stack["id"])), os_id, arch)
        if not terms:
            return [every]
        return [every.get(term, {}) for term in terms]
