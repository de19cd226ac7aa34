#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module: the foundation's record and the AMI of a cluster spec, read and checked in one step.

Why a module: the five cluster playbooks (Batch, EKS, HyperPod, ParallelCluster, PCS) each read the
record cluster_foundation wrote, refused a missing one or another cluster's, and found the AMI by the spec's
tags with a stat, a slurp, ec2_ami_info and three asserts of Jinja. The rules now live in
module_utils/cluster/cluster_inputs.py, where they are unit-tested; this module only wires them to the file
system and to EC2."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cluster_inputs
short_description: Read a cluster's foundation record and find its AMI by the spec's image.tags
description:
  - Reads the record the C(trainstack.cluster.cluster_foundation) playbook wrote for the spec's cluster,
    C(<records_dir>/<name>.foundation.json), and refuses a missing record, one that is not a JSON object, and
    (with O(match_record)) one whose C(cluster_name) or C(region) is not the spec's.
  - Then picks the AMI, first of O(ami_id), the spec's C(image.ami_id), and the newest available AMI of
    O(owners) that carries every tag of the spec's C(image.tags) (plus C(trainstack:flavour) O(flavour) unless
    the tags name one). Only the last asks AWS (C(DescribeImages)); when it finds none, the module fails
    naming the tags, the region and how to build or pass an AMI.
  - Every refusal names the file or key and the rule, and ends with O(refusal.nothing_done), the playbook's
    own words for what it has not done yet. The module changes nothing.
version_added: 0.2.0
author: trainstack maintainers (@trainstack)
options:
  spec:
    description: The checked spec, as M(trainstack.cluster.cluster_spec) returns it; only C(name), C(region)
      and C(image) are read.
    type: dict
    required: true
  spec_file:
    description: The spec file as the user named it (C(-e cluster_spec=...)); used in messages only.
    type: str
    required: true
  records_dir:
    description: Where the foundation's records are (the playbooks' C(cluster_foundation_outputs_dir)).
    type: path
    required: true
  match_record:
    description: Refuse a record of another cluster or region. Off where a later step refuses it with its
      own message (the C(trainstack.cluster.pcluster_foundation) filter).
    type: bool
    default: true
  find_ami:
    description: Pick an AMI at all (off for a playbook that launches none, or a run that deletes).
    type: bool
    default: true
  ami_id:
    description: An AMI id that wins over the spec's (a playbook's C(-e <name>_ami_id)); empty for none.
    type: str
    default: ""
  flavour:
    description: The C(trainstack:flavour) the AMI must carry unless the spec's tags name one (C(batch-gpu)
      for Batch, C(pcs-gpu) for PCS); an AMI of another flavour boots, but never joins the orchestrator.
    type: str
    default: ""
  owners:
    description: Owners whose AMIs are searched (account ids, C(self), C(amazon)).
    type: list
    elements: str
    default: [self]
  refusal:
    description: How the playbook words the end of its refusals.
    type: dict
    default: {}
    suboptions:
      nothing_done:
        description: The sentence every refusal ends with.
        type: str
        default: Nothing was sent.
      record_note:
        description: Said in parentheses after "run cluster_foundation ... first" when the record is missing.
        type: str
        default: ""
      build:
        description: How to build an AMI the look-up finds (default C(make image-ami), with
          C(IMAGE_FLAVOUR=) O(flavour) when set).
        type: str
        default: ""
      ami_variable:
        description: The playbook variable that passes an AMI id instead (default the spec's C(image.ami_id)).
        type: str
        default: ""
      name_owners:
        description: Name the owners searched when no AMI is found.
        type: bool
        default: false
extends_documentation_fragment:
  - amazon.aws.common.modules
  - amazon.aws.region.modules
  - amazon.aws.boto3
notes:
  - Supports check mode; it only reads.
  - The look-up runs in the spec's C(region); O(region) is not used.
seealso:
  - module: trainstack.cluster.cluster_spec
  - module: amazon.aws.ec2_ami_info
"""

EXAMPLES = r"""
- name: Read the foundation's record and find the batch-gpu AMI
  trainstack.cluster.cluster_inputs:
    spec: "{{ checked.spec }}"
    spec_file: "{{ cluster_spec }}"
    records_dir: "{{ playbook_dir }}/../build/clusters"
    ami_id: "{{ batch_cluster_ami_id | default('') }}"
    flavour: batch-gpu
    refusal:
      ami_variable: batch_cluster_ami_id
  register: found

- name: Use what was found
  ansible.builtin.debug:
    msg: "{{ found.ami_id }} in {{ found.outputs.private_subnet_id }}"
"""

RETURN = r"""
record_path:
  description: The record that was read.
  returned: success
  type: str
  sample: build/clusters/train-batch.foundation.json
outputs:
  description: The foundation's outputs, as the record holds them.
  returned: success
  type: dict
ami_id:
  description: The AMI picked; empty where O(find_ami) is off and neither O(ami_id) nor the spec names one.
  returned: success
  type: str
  sample: ami-0123456789abcdef0
ami_source:
  description: Where the AMI came from, C(ami_id), C(spec) or C(tags); empty when there is none.
  returned: success
  type: str
ami_tags:
  description: The tags searched, when the AMI was looked up.
  returned: success
  type: dict
"""

import os
from typing import Any

try:
    from ansible_collections.amazon.aws.plugins.module_utils.ec2 import AnsibleEC2Error, describe_images
    from ansible_collections.amazon.aws.plugins.module_utils.modules import AnsibleAWSModule
except ImportError:  # pragma: no cover - amazon.aws is a dependency of this collection
    AnsibleAWSModule = None

from ansible_collections.trainstack.cluster.plugins.module_utils.aws.client import client
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.cluster_inputs import (
    Describe,
    InputsError,
    Refusal,
    record_path,
    request_from_spec,
    resolve,
)

_REFUSAL = {
    "nothing_done": {"type": "str", "default": "Nothing was sent."},
    "record_note": {"type": "str", "default": ""},
    "build": {"type": "str", "default": ""},
    "ami_variable": {"type": "str", "default": ""},
    "name_owners": {"type": "bool", "default": False},
}


def argument_spec() -> dict[str, Any]:
    return {
        "spec": {"type": "dict", "required": True},
        "spec_file": {"type": "str", "required": True},
        "records_dir": {"type": "path", "required": True},
        "match_record": {"type": "bool", "default": True},
        "find_ami": {"type": "bool", "default": True},
        "ami_id": {"type": "str", "default": ""},
        "flavour": {"type": "str", "default": ""},
        "owners": {"type": "list", "elements": "str", "default": ["self"]},
        "refusal": {"type": "dict", "default": {}, "options": _REFUSAL, "apply_defaults": True},
    }


def read_text(path: str) -> str | None:
    """The record's text, or None where there is no such file (a directory of that name counts as none)."""
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def ec2_describe(module: Any, region: str) -> Describe:
    """DescribeImages in the spec's region through amazon.aws's pagination, on the client every trainstack
    module uses (module_utils/aws/client.py: botocore's standard retries); the client is made only when a
    look-up happens, so a run that needs none needs no credentials."""

    def describe(params: dict[str, Any]) -> list[dict[str, Any]]:
        try:
            return describe_images(client(module, "ec2", region), **params)
        except AnsibleEC2Error as error:
            module.fail_json_aws_error(error)
        raise AssertionError("unreachable")  # pragma: no cover - fail_json_aws_error exits

    return describe


def main() -> None:
    if AnsibleAWSModule is None:
        from ansible.module_utils.basic import AnsibleModule

        AnsibleModule(argument_spec={}, bypass_checks=True).fail_json(
            msg="trainstack.cluster.cluster_inputs needs the amazon.aws collection (module_utils): install it"
        )
    module = AnsibleAWSModule(argument_spec=argument_spec(), supports_check_mode=True)
    params = module.params
    try:
        request = request_from_spec(
            params["spec"],
            spec_file=params["spec_file"],
            records_dir=params["records_dir"],
            given_ami=params["ami_id"],
            flavour=params["flavour"],
            owners=tuple(params["owners"]),
            match_record=params["match_record"],
            find_ami=params["find_ami"],
            refusal=Refusal(**params["refusal"]),
        )
        text = read_text(record_path(request.records_dir, request.name))
        found = resolve(request, text, ec2_describe(module, request.region))
    except InputsError as error:
        module.fail_json(msg=str(error))
    module.exit_json(
        changed=False,
        record_path=found.record_path,
        outputs=found.outputs,
        ami_id=found.ami_id,
        ami_source=found.ami_source,
        ami_tags=found.ami_tags,
    )


if __name__ == "__main__":
    main()
