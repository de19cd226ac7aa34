#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module: the account's service quotas read, and a cluster spec that exceeds one refused, before
anything of the cluster is created.

Why a module of its own: the five cluster playbooks and the foundation's call it as their last read-only step
before the first create, whatever the backend; the rules are in module_utils (aws/service_quotas.py: the
one table of EC2 quota codes, the reads and the verdict; cluster/cluster_quotas.py: what each queue needs),
where they are unit-tested. This module wires them to the Service Quotas API."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cluster_quotas
short_description: Read the service quotas a cluster spec needs and refuse a spec that exceeds one
description:
  - Adds up what the spec's compute queues can grow to against each quota they count against, reads those
    quotas from the Service Quotas API in the spec's region, and fails, naming each C(queues[N].max_count),
    the quota's name and code, its value and what the spec needs, when the spec needs more than a quota.
  - For C(parallelcluster), C(pcs), C(eks) and C(batch) a queue needs C(max_count) x the instance type's
    vCPUs (the instance catalog's C(vcpus)) of the EC2 vCPU quota of its instance class and purchase option
    (for example C(Running On-Demand P instances), C(L-417A185B)). For C(hyperpod) it needs C(max_count) of
    SageMaker's C(ml.<type> for cluster usage) quota, found by that name.
  - A quota is read with C(GetServiceQuota) (the value applied to the account), falling back to
    C(GetAWSDefaultServiceQuota) where Service Quotas holds none for the account; SageMaker's per-type
    quotas with C(ListServiceQuotas).
  - A quota that cannot be read (no endpoint, access denied, no such quota, a failed call) does not refuse
    the spec; it becomes a warning naming the quota and what the spec needs, and the run goes on.
  - Capacity Block queues, types without a vCPU count in the catalog and classes without a known quota are
    not checked; RV(unchecked) says which and why.
  - The module changes nothing.
version_added: 0.2.0
author: trainstack maintainers (@trainstack)
options:
  spec:
    description: The cluster spec as a mapping (for example M(trainstack.cluster.cluster_spec)'s returned
      C(spec)); it is checked again as that module checks it.
    type: dict
    required: true
  stacks_dir:
    description: The directory of the stack files the spec's C(image.stack) names (default the collection's).
    type: path
  backend:
    description: What launches the queues; it decides which quotas they count against.
    type: str
    required: true
    choices: [parallelcluster, pcs, eks, batch, hyperpod]
  nothing_done:
    description: The sentence a refusal ends with, the playbook's words for what it has not done.
    type: str
    default: Nothing was created.
extends_documentation_fragment:
  - amazon.aws.common.modules
  - amazon.aws.region.modules
  - amazon.aws.boto3
notes:
  - Supports check mode; it only reads.
  - The quotas are read in the spec's C(region); O(region) is not used.
  - The quota bounds everything the account runs in the region at once; the check holds the spec's own
    maximum to it, so a spec that passes may still meet a quota other instances already use.
seealso:
  - module: trainstack.cluster.cluster_spec
"""

EXAMPLES = r"""
- name: Read the quotas the spec needs; refuse a spec over one
  trainstack.cluster.cluster_quotas:
    spec: "{{ checked.spec }}"
    backend: pcs
  register: quotas
"""

RETURN = r"""
quotas:
  description: Each quota compared, with what the spec needs of it; C(value) is null where it could not be
    read, and C(problem) says why.
  returned: always
  type: list
  elements: dict
  sample:
    - service: ec2
      code: L-417A185B
      name: Running On-Demand P instances
      unit: vCPUs
      value: 384.0
      source: applied
      problem: ""
      needed: 768
      keys: ["queues[0].max_count"]
unchecked:
  description: Queues not held to a quota, each with the reason.
  returned: always
  type: list
  elements: str
"""

from typing import Any

try:
    from ansible_collections.amazon.aws.plugins.module_utils.modules import AnsibleAWSModule
except ImportError:  # pragma: no cover - amazon.aws is a dependency of this collection
    AnsibleAWSModule = None

from ansible_collections.trainstack.cluster.plugins.module_utils.aws import service_quotas
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.client import client
from ansible_collections.trainstack.cluster.plugins.module_utils.catalog import instance_catalog
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import cluster_quotas
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.cluster_spec import (
    ClusterSpecError,
    normalise,
)

READ_ATTEMPTS = 3


def argument_spec() -> dict[str, Any]:
    return {
        "spec": {"type": "dict", "required": True},
        "stacks_dir": {"type": "path"},
        "backend": {"type": "str", "required": True, "choices": list(cluster_quotas.BACKENDS)},
        "nothing_done": {"type": "str", "default": cluster_quotas.NOTHING_DONE},
    }


def main() -> None:
    if AnsibleAWSModule is None:
        from ansible.module_utils.basic import AnsibleModule

        AnsibleModule(argument_spec={}, bypass_checks=True).fail_json(
            msg="trainstack.cluster.cluster_quotas needs the amazon.aws collection (module_utils): install it"
        )
    module = AnsibleAWSModule(argument_spec=argument_spec(), supports_check_mode=True)
    params = module.params
    catalog = instance_catalog.default()
    try:
        spec = normalise(params["spec"], "spec", catalog=catalog, stacks=params["stacks_dir"])
    except ClusterSpecError as exc:
        module.fail_json(msg=f"cluster spec is invalid:\n{exc}", problems=exc.problems)
    found = cluster_quotas.needs(spec, params["backend"], catalog)
    quotas = [need.quota for need in found.needs]
    # The client is made only when there is something to read: a spec of Capacity Blocks needs no AWS. A
    # quota that cannot be read is a warning, so its reads give up after READ_ATTEMPTS.
    readings = []
    if quotas:
        quota_client = client(module, "service-quotas", spec["region"], attempts=READ_ATTEMPTS)
        readings = service_quotas.read(quota_client, quotas)
    verdict = service_quotas.verdict(found.needs, readings, spec["region"])
    for text in verdict.warnings:
        module.warn(text)
    result = {"changed": False, "quotas": verdict.compared, "unchecked": found.unchecked}
    if verdict.refusals:
        module.fail_json(msg=cluster_quotas.refusal(verdict.refusals, params["nothing_done"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
