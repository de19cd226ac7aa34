#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module: what a launch plans by, read on its launch host in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: launch_host_facts
short_description: Read a launch host's OS, its image's record and its Slurm partition's nodes in one run
description:
  - "A launch plans by three things on the host it runs from, which runs the cluster's image: its OS and
    architecture (they pick a GPU node's lock), the test case environments its image baked (the image's
    record, C(image.json)), and how many nodes the Slurm partition has. Each is a read, but each module run
    costs the launch a round trip and a Python start on that host; this module reads all three in one."
  - The OS facts are Ansible's own (the C(distribution), C(platform) and C(pkg_mgr) collectors that
    M(ansible.builtin.setup) runs), returned as facts so that later tasks of the play (the package manager's)
    find them as after C(setup).
version_added: 0.2.0
author: trainstack maintainers (@trainstack)
options:
  os_facts:
    description: Read the OS, architecture and package-manager facts.
    type: bool
    default: true
  image_record:
    description:
      - Path of the image's record (JSON). A missing file means an image that baked nothing (RV(testcase_envs)
        is empty); a file that cannot be read, is not JSON, or whose C(testcase_envs) is not a list fails the
        task, naming the file.
      - Not given, no record is read.
    type: path
  sinfo:
    description:
      - List the partitions and their node counts (C(sinfo --noheader --format='%P %D')).
      - A failing C(sinfo) (no Slurm on the host, no controller) is returned in RV(sinfo_error), not raised,
        so that the launch refuses a bad request for what it is before it reports the partition.
    type: bool
    default: false
  partition:
    description: With O(sinfo=true), list only this partition; empty lists every partition.
    type: str
    default: ""
notes:
  - Supports check mode (it only reads).
"""

EXAMPLES = r"""
- name: Read what the launch plans by
  trainstack.cluster.launch_host_facts:
    image_record: /opt/trainstack/image.json
    sinfo: true
    partition: gpu
  register: launch_host
"""

RETURN = r"""
ansible_facts:
  description: The OS facts, as C(setup) with those three collectors returns them.
  returned: with O(os_facts=true)
  type: dict
  sample: {distribution: Ubuntu, distribution_version: "22.04", os_family: Debian, architecture: x86_64}
image_record_found:
  description: The image's record exists.
  returned: always
  type: bool
testcase_envs:
  description: The C(testcase_envs) list of the image's record; empty without one.
  returned: always
  type: list
  elements: raw
sinfo_lines:
  description: C(sinfo)'s lines, C(<partition> <nodes>) each; empty when it failed.
  returned: with O(sinfo=true)
  type: list
  elements: str
sinfo_error:
  description: Why C(sinfo) failed (its exit status and message); empty when it ran.
  returned: with O(sinfo=true)
  type: str
"""

import json
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.facts import ansible_collector, default_collectors
from ansible.module_utils.facts.namespace import PrefixFactNamespace

# The collectors the launch reads (setup's subset ["!all", "!min", distribution, platform, pkg_mgr]).
FACT_SUBSET = ["!all", "!min", "distribution", "platform", "pkg_mgr"]


def os_facts(module: AnsibleModule) -> dict[str, Any]:
    """Ansible's own facts of the subset, named as setup names them (ansible_distribution, ...)."""
    collector = ansible_collector.get_ansible_collector(
        all_collector_classes=default_collectors.collectors,
        namespace=PrefixFactNamespace(namespace_name="ansible", prefix="ansible_"),
        filter_spec="*",
        gather_subset=FACT_SUBSET,
        gather_timeout=10,
        minimal_gather_subset=frozenset(),
    )
    facts = collector.collect(module=module)
    facts.pop("module_setup", None)
    return facts


def read_image_record(path: str) -> tuple[bool, list[Any]]:
    """(found, testcase_envs) of the image's record; ValueError naming the file when it is unusable."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return False, []
    except OSError as err:
        raise ValueError(f"image_record {path} cannot be read: {err.strerror}") from err
    try:
        record = json.loads(text)
    except ValueError as err:
        raise ValueError(f"image_record {path} is not JSON: {err}") from err
    if not isinstance(record, dict):
        raise ValueError(f"image_record {path} must hold a JSON object, not {type(record).__name__}")
    envs = record.get("testcase_envs", [])
    if not isinstance(envs, list):
        raise ValueError(f"image_record {path}: testcase_envs must be a list, not {type(envs).__name__}")
    return True, envs


def sinfo_argv(partition: str) -> list[str]:
    """sinfo's partitions and node counts, of one partition when one is named."""
    return ["sinfo", "--noheader", "--format=%P %D"] + ([f"--partition={partition}"] if partition else [])


def read_sinfo(module: AnsibleModule, partition: str) -> tuple[list[str], str]:
    """sinfo's lines, or why it failed: the caller decides when that stops the launch."""
    try:
        # handle_exceptions=False: a host without sinfo raises here instead of failing the module.
        rc, out, err = module.run_command(sinfo_argv(partition), handle_exceptions=False)
    except OSError as error:
        return [], f"sinfo could not run: {error}"
    if rc != 0:
        return [], f"sinfo failed ({rc}): {err.strip() or out.strip()}"
    return out.splitlines(), ""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "os_facts": {"type": "bool", "default": True},
            "image_record": {"type": "path"},
            "sinfo": {"type": "bool", "default": False},
            "partition": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    result: dict[str, Any] = {"changed": False, "image_record_found": False, "testcase_envs": []}
    if p["image_record"]:
        try:
            result["image_record_found"], result["testcase_envs"] = read_image_record(p["image_record"])
        except ValueError as err:
            module.fail_json(msg=str(err))
    if p["sinfo"]:
        result["sinfo_lines"], result["sinfo_error"] = read_sinfo(module, p["partition"])
    if p["os_facts"]:
        result["ansible_facts"] = os_facts(module)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
