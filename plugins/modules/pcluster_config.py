#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module: render a cluster spec as a ParallelCluster 3 configuration file.

Why a module and not a filter: the configuration is a file `pcluster create-cluster` reads, so writing it is
the job; a module writes it only when its content changes (changed, check mode and diff come with it), and its
argument spec checks the foundation outputs key by key before anything is rendered. The rendering itself is
module_utils/cluster/pcluster_render.py, plain data in, plain data out, so a filter could wrap it if a
template needs one.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pcluster_config
short_description: Render a trainstack cluster spec as a ParallelCluster 3 configuration
description:
  - Checks the cluster spec exactly as M(trainstack.cluster.cluster_spec) does (O(path) or an already
    normalised O(spec)), then renders the ParallelCluster 3 configuration, Region, Image (Os, CustomAmi),
    HeadNode, LoginNodes, Scheduling (Slurm queues, compute resources, capacity, EFA, placement groups,
    accounting database), SharedStorage (FSx for Lustre, EFS for C(/home)) and Monitoring.
  - Every node runs C(s3://<bucket>/trainstack/bootstrap.sh) as its OnNodeConfigured action with its role
    (C(head), C(login) or C(compute)), C(--bundle s3://<bucket>/trainstack/bundles/<sha256>.tar.gz) and
    C(--sha256 <sha256>) as arguments.
  - Where the cluster lives comes from O(foundation), the outputs of the foundation playbook.
  - With O(dest), writes the configuration as YAML when its content differs (check mode and diff supported).
  - "Pure controller-side computation; run it with C(delegate_to: localhost) or in a
    C(hosts: localhost) play."
version_added: 0.1.0
author: trainstack maintainers (@trainstack)
options:
  path:
    description: The spec file; give this or O(spec).
    type: path
  spec:
    description: A spec as a mapping (for example C(cluster_spec)'s returned C(spec)); checked again.
    type: dict
  stacks_dir:
    description: The directory of the stack files the spec's C(image.stack) names (default the collection's).
    type: path
  foundation:
    description: What the foundation created or found; the keys the spec needs must be set.
    type: dict
    required: true
    suboptions:
      subnet_public:
        description: Subnet of the head node and login nodes (required when C(network.vpc=new)).
        type: str
      subnet_private:
        description: Subnet of the compute nodes (required when C(network.vpc=new)).
        type: str
      security_group:
        description: Security group added to every node (AdditionalSecurityGroups).
        type: str
      bucket:
        description: The cluster's S3 bucket; holds C(trainstack/bootstrap.sh) and the node bundles.
        type: str
        required: true
      bundle_sha256:
        description:
          - sha256 (64 lowercase hex digits) of the node bundle that playbooks/node_bundle.yml built and
            uploaded to C(trainstack/bundles/<sha256>.tar.gz); every node checks the bundle against it.
        type: str
        required: true
      instance_profile:
        description:
          - Instance profile ARN for every node; without it nodes get read access to O(foundation.bucket).
        type: str
      iam_policies:
        description:
          - IAM policy ARNs added to every node's role (not used with O(foundation.instance_profile)).
        type: list
        elements: str
      placement_group:
        description: Name of an existing cluster placement group for queues with C(placement_group=true).
        type: str
      database:
        description: The Slurm accounting database; required when the spec sets C(slurm_accounting=true).
        type: dict
        suboptions:
          uri:
            description: Host and port of the MySQL-compatible database.
            type: str
            required: true
          user_name:
            description: Database user.
            type: str
            required: true
          password_secret_arn:
            description: Secrets Manager ARN of the user's password.
            type: str
            required: true
      fsx_file_system_id:
        description:
          - An FSx for Lustre file system the foundation made (C(aws_foundation_outputs.fsx_file_system_id)),
            mounted instead of one ParallelCluster would create from the spec's C(shared_storage.fsx_lustre);
            it and its data repository link outlive the cluster.
        type: str
  ami_id:
    description: The AMI, where the spec finds it by C(image.tags) (look it up with amazon.aws.ec2_ami_info).
    type: str
  dest:
    description: Write the configuration here (YAML).
    type: path
  mode:
    description: File mode of O(dest).
    type: raw
    default: "0644"
notes:
  - Supports check mode and diff mode.
seealso:
  - module: trainstack.cluster.cluster_spec
"""

EXAMPLES = r"""
- name: Render the ParallelCluster configuration from the spec and the foundation's outputs
  trainstack.cluster.pcluster_config:
    path: inventories/aws/clusters/p5.yml
    foundation:
      subnet_public: "{{ foundation.subnet_public }}"
      subnet_private: "{{ foundation.subnet_private }}"
      security_group: "{{ foundation.security_group }}"
      bucket: "{{ foundation.bucket }}"
      bundle_sha256: "{{ node_bundle_sha256 }}"
      placement_group: "{{ foundation.placement_group }}"
    dest: "{{ playbook_dir }}/../build/clusters/train-p5.yaml"
"""

RETURN = r"""
config:
  description: The ParallelCluster 3 configuration as data.
  returned: success
  type: dict
text:
  description: The configuration as YAML, as written to O(dest).
  returned: success
  type: str
spec:
  description: The normalised spec that was rendered.
  returned: success
  type: dict
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.cluster_spec import (
    ClusterSpecError,
    load_file,
    normalise,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.pcluster_render import (
    RenderError,
    render,
)

_DATABASE = {
    "uri": {"type": "str", "required": True},
    "user_name": {"type": "str", "required": True},
    "password_secret_arn": {"type": "str", "required": True, "no_log": False},
}
_FOUNDATION = {
    "subnet_public": {"type": "str"},
    "subnet_private": {"type": "str"},
    "security_group": {"type": "str"},
    "bucket": {"type": "str", "required": True},
    "bundle_sha256": {"type": "str", "required": True},
    "instance_profile": {"type": "str"},
    "iam_policies": {"type": "list", "elements": "str"},
    "placement_group": {"type": "str"},
    "database": {"type": "dict", "options": _DATABASE},
    "fsx_file_system_id": {"type": "str"},
}


def _as_yaml(config: dict) -> str:
    """Block-style YAML in the renderer's key order (ParallelCluster's documentation order)."""
    import yaml

    return "---\n" + yaml.safe_dump(config, sort_keys=False, default_flow_style=False)


def _read(path: str) -> str | None:
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _write(module: AnsibleModule, dest: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(dest))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".pcluster-config-")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    module.atomic_move(tmp, dest)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path"},
            "spec": {"type": "dict"},
            "stacks_dir": {"type": "path"},
            "foundation": {"type": "dict", "required": True, "options": _FOUNDATION},
            "ami_id": {"type": "str"},
            "dest": {"type": "path"},
            "mode": {"type": "raw", "default": "0644"},
        },
        required_one_of=[("path", "spec")],
        mutually_exclusive=[("path", "spec")],
        supports_check_mode=True,
    )
    params = module.params
    foundation = {key: value for key, value in params["foundation"].items() if value is not None}
    try:
        if params["path"]:
            spec = load_file(params["path"], stacks=params["stacks_dir"])
        else:
            spec = normalise(params["spec"], "spec", stacks=params["stacks_dir"])
        config = render(spec, foundation, params["ami_id"])
    except ClusterSpecError as exc:
        module.fail_json(msg=f"cluster spec is invalid:\n{exc}", problems=exc.problems)
    except RenderError as exc:
        module.fail_json(msg=str(exc))
    text = _as_yaml(config)
    result = {"changed": False, "config": config, "text": text, "spec": spec}
    dest = params["dest"]
    if dest:
        before = _read(dest)
        result["changed"] = before != text
        if module._diff:
            result["diff"] = {
                "before": before or "",
                "after": text,
                "before_header": dest,
                "after_header": dest,
            }
        if result["changed"] and not module.check_mode:
            _write(module, dest, text)
        if not module.check_mode:
            file_args = module.load_file_common_arguments({"path": dest, "mode": params["mode"]})
            result["changed"] = module.set_fs_attributes_if_different(file_args, result["changed"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
