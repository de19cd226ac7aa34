#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module: read an image's stack record from its registry and judge it against this host's driver."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: container_image_info
short_description: Read an image's stack record from its registry and check it against the host's driver
description:
  - Parses O(image) as enroot does (a first component holding C(.) or C(:) names the registry, else Docker
    Hub; C(REGISTRY#IMAGE) is accepted too) and asks the registry for its manifest (registry HTTP API v2,
    OCI and Docker manifest media types). A multi-architecture index is followed to the manifest of O(arch).
  - Returns the manifest's digest (what the nodes' import cache is keyed by and what a pinned reference names)
    and the image's stack record, the manifest annotation C(org.trainstack.image.json) that every image the
    collection builds carries.
  - Reads this host's own stack record (O(host_record), written by the image it was built from) for the NVIDIA
    driver, else asks C(nvidia-smi), and runs every C(driver_for_cuda) rule of O(rules) (the version matrix's
    C(stacks/rules.yml)) on that driver and the image's CUDA (its toolkit and PyTorch's CUDA runtime).
  - Fails, saying which rule the reference broke, on a bad reference, a registry that does not answer or
    refuses to show the image, and a tag or digest the registry does not hold (404). Never fails on the
    driver check; it returns C(problems) and the caller decides.
  - Read-only; runs the same in check mode.
version_added: 0.1.0
author: trainstack maintainers (@trainstack)
options:
  image:
    description:
      - Image reference, e.g. C(10.77.0.1:8673/lab/trainstack/pytorch:ts-2026.12) or
        C(nvcr.io#nvidia/pytorch:25.01-py3).
    type: str
    required: true
  allow_http:
    description:
      - Ask the registry over plain HTTP (a registry on a private lab network; enroot's C(ENROOT_ALLOW_HTTP)).
    type: bool
    default: false
  arch:
    description: Architecture whose image an index is followed to (default this host's).
    type: str
  username:
    description: User for a registry that asks for Basic credentials or issues tokens for them.
    type: str
  password:
    description: Password or token for O(username) (for Amazon ECR, the authorization token's password).
    type: str
  rules:
    description:
      - The version matrix's rules (C(lookup('trainstack.cluster.stack', part='rules'))); empty skips the
        driver check.
    type: list
    elements: dict
    default: []
  host_record:
    description: This host's stack record (its image's C(image.json)).
    type: path
    default: /etc/trainstack/image.json
  timeout:
    description: Seconds to wait for each registry request.
    type: int
    default: 20
"""

EXAMPLES = r"""
- name: Read the image's stack record before submitting
  trainstack.cluster.container_image_info:
    image: 10.77.0.1:8673/lab/trainstack/pytorch:ts-2026.12
    allow_http: true
    rules: "{{ lookup('trainstack.cluster.stack', part='rules') }}"
  register: image_info
"""

RETURN = r"""
reference:
  description: The parsed reference (registry, repository, tag, digest).
  returned: always
  type: dict
annotations:
  description: The manifest's annotations.
  returned: always
  type: dict
digest:
  description: The manifest's digest (C(sha256:...)).
  returned: always
  type: str
pinned:
  description: The reference pinned to that digest (C(registry/repository@sha256:...)).
  returned: always
  type: str
media_type:
  description: The manifest's media type.
  returned: always
  type: str
record:
  description: >-
    The image's stack record (annotation C(org.trainstack.image.json) of the manifest, else the label of that
    name in the image configuration, where a Docker schema 2 manifest keeps it); null when it has none.
  returned: always
  type: dict
record_from:
  description: Where the record was read, C(annotation) or C(label); null when the image has none.
  returned: always
  type: str
image_cuda:
  description: The image's CUDA as the driver rule reads it (C(cuda), C(pytorch.cuda_runtime)); {} for CPU.
  returned: always
  type: dict
host_driver:
  description: This host's NVIDIA driver version; null when it has none.
  returned: always
  type: str
host_driver_source:
  description: Where the driver version came from (the host record's path, C(nvidia-smi)) or C(none).
  returned: always
  type: str
problems:
  description:
    - Driver rule findings (rule, message, citation); empty when the driver supports the image's CUDA or
      either is unknown.
  returned: always
  type: list
  elements: dict
"""

import json
import platform

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.trainstack.cluster.plugins.module_utils.image.oci_image import (
    ImageError,
    driver_problems,
    host_driver,
    http_fetch,
    image_cuda,
    parse_reference,
    read_image,
)


def _host_driver(module: AnsibleModule) -> tuple[str | None, str]:
    """The driver this host's own record names, else what nvidia-smi reports, else none."""
    path = module.params["host_record"]
    try:
        with open(path, encoding="utf-8") as handle:
            driver = host_driver(json.load(handle))
    except (OSError, ValueError):
        driver = None
    if driver:
        return driver, path
    smi = module.get_bin_path("nvidia-smi")
    if smi:
        rc, out, _err = module.run_command(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"], check_rc=False
        )
        lines = out.split()
        if rc == 0 and lines:
            return lines[0], "nvidia-smi"
    return None, "none"


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "image": {"type": "str", "required": True},
            "allow_http": {"type": "bool", "default": False},
            "arch": {"type": "str"},
            "username": {"type": "str"},
            "password": {"type": "str", "no_log": True},
            "rules": {"type": "list", "elements": "dict", "default": []},
            "host_record": {"type": "path", "default": "/etc/trainstack/image.json"},
            "timeout": {"type": "int", "default": 20},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        info = read_image(
            parse_reference(params["image"]),
            scheme="http" if params["allow_http"] else "https",
            arch=params["arch"] or platform.machine(),
            username=params["username"],
            password=params["password"],
            fetch=http_fetch(params["timeout"]),
        )
        driver, source = _host_driver(module)
        record = info["record"] or {}
        problems = driver_problems(record, driver, params["rules"]) if driver and record else []
    except ImageError as exc:
        module.fail_json(msg=str(exc), kind=exc.kind)
    module.exit_json(
        changed=False,
        image_cuda=image_cuda(record),
        host_driver=driver,
        host_driver_source=source,
        problems=problems,
        **info,
    )


if __name__ == "__main__":
    main()
