#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module: install a package repository's signing key only if its fingerprint is the pinned one."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: repo_key
short_description: Install a repository signing key, refused unless its fingerprint is pinned
description:
  - Downloads an OpenPGP public key (armored or binary) and writes it to O(dest) only when every primary key
    in the file has one of O(fingerprints). A key that differs fails the task naming O(repository), both
    fingerprints and the URL, and leaves O(dest) as it was.
  - The fingerprint is computed from the key packets themselves (no gpg on the host, no keyring consulted).
  - Plain C(http://) key URLs are refused unless O(allow_http=true); the fingerprint check applies either way.
  - Writes nothing when O(dest) already holds the same bytes.
version_added: 0.1.0
author: trainstack maintainers (@trainstack)
options:
  repository:
    description: The repository the key signs, as it should appear in messages (its name and URL).
    type: str
    required: true
  url:
    description: Where the key is published (C(https://), C(file://), or C(http://) with O(allow_http)).
    type: str
    required: true
  dest:
    description: The keyring file the repository's C(signed-by) (or C(gpgkey)) names.
    type: path
    required: true
  fingerprints:
    description: Accepted primary key fingerprints (40 or 64 hex digits; spaces ignored).
    type: list
    elements: str
    required: true
  allow_http:
    description: Accept a plain C(http://) key URL.
    type: bool
    default: false
  timeout:
    description: Network timeout in seconds.
    type: int
    default: 60
  mode:
    description: File mode of O(dest).
    type: raw
    default: "0644"
"""

EXAMPLES = r"""
- name: Install NVIDIA's CUDA repository key
  trainstack.cluster.repo_key:
    repository: NVIDIA CUDA (https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/)
    url: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/3bf863cc.pub
    dest: /usr/share/keyrings/trainstack-nvidia-cuda.asc
    fingerprints: [EB693B3035CD5710E231E123A4B469963BF863CC]
"""

RETURN = r"""
fingerprints:
  description: Primary key fingerprints found in the downloaded key.
  returned: success
  type: list
  elements: str
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible_collections.trainstack.cluster.plugins.module_utils.artifact.openpgp_key import (
    OpenPGPKeyError,
    normalise_fingerprint,
    primary_fingerprints,
)

MAX_KEY_BYTES = 1024 * 1024


def _pins(module: AnsibleModule) -> list[str]:
    """The pinned fingerprints, normalised; an empty or malformed pin list fails before any download."""
    params = module.params
    if not params["fingerprints"]:
        module.fail_json(msg=f"fingerprints: no fingerprint is pinned for the key of {params['repository']}")
    try:
        return [normalise_fingerprint(f) for f in params["fingerprints"]]
    except OpenPGPKeyError as exc:
        module.fail_json(msg=f"fingerprints: {exc} (repository {params['repository']})")
    raise AssertionError("unreachable")  # pragma: no cover - fail_json exits


def _fetch(module: AnsibleModule) -> bytes:
    params = module.params
    url = params["url"]
    if url.startswith("http://") and not params["allow_http"]:
        module.fail_json(msg=f"url: {url} (key of {params['repository']}) is plain http://; refused")
    if not url.startswith(("https://", "http://", "file://")):
        module.fail_json(msg=f"url: {url} (key of {params['repository']}) must be https:// or file://")
    try:
        with open_url(url, timeout=params["timeout"], follow_redirects="safe") as response:
            data = response.read(MAX_KEY_BYTES + 1)
    except Exception as exc:  # every transport error becomes one message naming the repository
        module.fail_json(msg=f"cannot download the key of {params['repository']} from {url}: {exc}")
    if len(data) > MAX_KEY_BYTES:
        module.fail_json(msg=f"the key of {params['repository']} at {url} is over {MAX_KEY_BYTES} bytes")
    return data


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "repository": {"type": "str", "required": True},
            "url": {"type": "str", "required": True},
            "dest": {"type": "path", "required": True},
            "fingerprints": {"type": "list", "elements": "str", "required": True},
            "allow_http": {"type": "bool", "default": False},
            "timeout": {"type": "int", "default": 60},
            "mode": {"type": "raw", "default": "0644"},
        },
        supports_check_mode=True,
    )
    params = module.params
    pins = _pins(module)
    data = _fetch(module)
    try:
        found = primary_fingerprints(data)
    except OpenPGPKeyError as exc:
        module.fail_json(msg=f"the key of {params['repository']} at {params['url']} is unusable: {exc}")
    stranger = [f for f in found if f not in pins]
    if stranger:
        module.fail_json(
            msg=f"signing key of repository {params['repository']} has fingerprint {', '.join(stranger)}, "
            f"not the pinned {', '.join(pins)} (key URL {params['url']}); nothing was installed",
            fingerprints=found,
        )
    dest = params["dest"]
    changed = not (os.path.isfile(dest) and _read(dest) == data)
    if changed and not module.check_mode:
        directory = os.path.dirname(os.path.abspath(dest))
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".repo-key-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        module.atomic_move(tmp, dest)
    if not module.check_mode:
        changed = module.set_fs_attributes_if_different(
            module.load_file_common_arguments({"path": dest, "mode": params["mode"]}), changed
        )
    module.exit_json(changed=changed, fingerprints=found)


if __name__ == "__main__":
    main()
