#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module: read and check one cluster spec, and answer it with every default filled."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cluster_spec
short_description: Read, check and normalise a trainstack AWS cluster spec
description:
  - Reads one cluster spec (one YAML document per cluster, see C(docs/aws-parallelcluster.md)) and checks it
    against its schema (module_utils/cluster/cluster_spec.py, published as
    C(stacks/schema/cluster.schema.json)); unknown or misspelt keys, wrong types and null sections fail with
    the file and the dotted path of the key.
  - Then checks the rules the schema cannot express, each failure naming the key and the rule, for example
    a queue's instance type must be in the instance catalog (C(stacks/instance_types.yml)), C(efa=true) needs
    a type with EFA, FSx for Lustre sizes and per-unit throughputs must be ones AWS accepts for the
    deployment type, and the image's stack must support every queue's instance family.
  - Then refuses what any target service (ParallelCluster, SageMaker HyperPod, AWS PCS, Amazon EKS, AWS
    Batch) would refuse, naming the key, the service and the rule's source
    (C(module_utils/cluster/target_limits.py)), for example a cluster name PCS or HyperPod refuses, a queue
    named C(default), more queues than ParallelCluster takes, a misspelt region or head node instance type
    (with a suggestion).
  - Returns the spec with every default filled. Reads nothing from AWS and changes nothing.
  - "Pure controller-side computation; run it with C(delegate_to: localhost) or in a
    C(hosts: localhost) play."
version_added: 0.1.0
author: trainstack maintainers (@trainstack)
options:
  path:
    description: The spec file (C(inventories/aws/clusters/<name>.yml)).
    type: path
    required: true
  stacks_dir:
    description: The directory of the stack files the spec's C(image.stack) names (default the collection's).
    type: path
notes:
  - Supports check mode; the module never changes anything.
"""

EXAMPLES = r"""
- name: Check the cluster spec before anything is created
  trainstack.cluster.cluster_spec:
    path: "{{ playbook_dir }}/../inventories/aws/clusters/p5.yml"
  register: cluster

- name: Use a default the module filled in
  ansible.builtin.debug:
    msg: "{{ cluster.spec.queues[0].efa }}"
"""

RETURN = r"""
spec:
  description:
    - The spec with every default filled (efa, placement_group, min_count, capacity_type, FSx settings).
  returned: success
  type: dict
path:
  description: The file that was read.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.cluster_spec import (
    ClusterSpecError,
    load_file,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={"path": {"type": "path", "required": True}, "stacks_dir": {"type": "path"}},
        supports_check_mode=True,
    )
    path = module.params["path"]
    try:
        spec = load_file(path, stacks=module.params["stacks_dir"])
    except ClusterSpecError as exc:
        module.fail_json(msg=f"cluster spec is invalid:\n{exc}", problems=exc.problems, path=path)
    module.exit_json(changed=False, spec=spec, path=path)


if __name__ == "__main__":
    main()
