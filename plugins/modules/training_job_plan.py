#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Documentation of the training_job_plan action plugin (it runs on the controller; no module code)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: training_job_plan
short_description: Check a request to train a test case and plan its launch
version_added: 0.2.0
description:
  - Runs on the controller, where the test case catalog, the test cases' locks and the instance catalog are.
    Reads files only and changes nothing, in check mode too.
  - Refuses the request, with one message naming every broken rule and the variable it is about, when a
    C(training_job_*) variable is unknown (with close matches), the test case is not in the catalog, an input
    breaks its rule (names, paths, counts, ports, environment and argument names, image references, Nsight
    Systems options), or the request does not fit the test case (launcher, includes, the lock and its pins,
    configs).
  - The lock is the one of the nodes' target, C(requirements.lock) without GPUs and
    C(requirements.gpu-<os>-<arch>.lock) on GPU nodes (GPUs and architecture from the instance catalog, the OS
    from C(training_job_node_os) or O(node)); a target the test case has no lock for is refused naming the
    target, the locks it has and the command that makes one.
  - When the run installs no lock (C(training_job_venv=false)), the torch O(node) found is checked against
    the lock's version; only C(training_job_accept_torch) naming exactly that version lets it through, and the
    plan records the exception (RV(plan), C(TRAINSTACK_TORCH_ACCEPTED) in the ranks' environment).
  - With O(image), also checks the container image as M(trainstack.cluster.container_image_info) described
    it (a stack record, CUDA the nodes' driver can run); O(image_unchecked) turns that refusal into
    RV(image_problems).
  - Used by the training_job role; its logic is in C(module_utils/launch/plan.py).
options:
  request:
    description:
      - The role's variables, every C(training_job_*) name with its value (defaults filled in).
    type: dict
    required: true
  catalog:
    description: The test case catalog (the collection's C(testcases/) directory).
    type: path
    required: true
  argument_specs:
    description: The training_job role's C(meta/argument_specs.yml); its options are the variables it knows.
    type: path
    required: true
  image:
    description:
      - What M(trainstack.cluster.container_image_info) answered for the container image (empty when the
        registry was not read). Given, the image is checked and the plan says how to import it.
    type: dict
  image_unchecked:
    description: Report the image's problems in RV(image_problems) instead of refusing it.
    type: bool
    default: false
  node:
    description:
      - What the role read about the nodes on the launch host. C(facts) (its C(distribution),
        C(distribution_version) and C(distribution_major_version), turned into the stack's OS id; or C(os),
        the id itself) and C(arch) pick a GPU node's lock.
      - C(envs) is C(testcase_envs) of the launch host's C(/etc/trainstack/image.json), the environments its
        image baked (one of the same test case and key is used instead of building one).
      - C(torch) is the version C(training_job_python) imports, an empty string when it imports none, null
        when it was not read.
    type: dict
author: trainstack maintainers (@trainstack)
"""

EXAMPLES = r"""
- name: Plan the launch
  trainstack.cluster.training_job_plan:
    request:
      training_job_testcase: pytorch/fsdp
      training_job_launcher: local
    catalog: /path/to/ansible_collections/trainstack/cluster/testcases
    argument_specs: /path/to/ansible_collections/trainstack/cluster/roles/training_job/meta/argument_specs.yml
  register: planned
"""

RETURN = r"""
plan:
  description:
    - Paths on the shared filesystem (C(root), C(payload), C(checkpoints), C(containers), C(venv_dir)), the
      nodes' C(target) and its lock (C(lock_file), C(lock_name), C(lock)), the virtualenv's key (the lock's
      content and the interpreter), C(baked_venv) and C(venv) (C(baked <path>), C(build <path>) or
      C(none (<interpreter>))), C(torch) (C(lock), C(found), C(accepted)), C(python), the entrypoint's
      C(arguments) and C(cli), C(world_size), the instance type's C(fabric) and the ranks' C(environment),
      the test case's C(manifest), the C(image) as given, how pyxis imports it (C(container), C(ecr_region))
      and the PyTorchJob's C(k8s_image_ref).
  returned: success
  type: dict
image_problems:
  description: What makes the image unfit (empty without O(image)).
  returned: success
  type: list
  elements: str
"""
