#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module: the one way trainstack downloads a pinned artifact.

The download, its checksums and the lock entries are module_utils/artifact/artifact_fetch.py; this module
checks its options and calls it.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: artifact
short_description: Download a stack artifact, verified against its pinned or locked sha256
description:
  - Every file a trainstack build downloads (driver installers, the EFA installer, sources, wheels) goes
    through this module, so no download skips its checksum.
  - "The sha256 comes from the stack (C(stacks/<id>.yml)); where the stack has none, from the stack's lock
    file written by C(make mirror); otherwise the download is refused unless the stack marks that artifact
    C(verify: false) with a reason (O(verify=false) and O(unverified_reason))."
  - A plain C(http://) URL is refused unless the stack allows it for that artifact (O(allow_http=true)); an
    artifact without a checksum is refused over a plain C(http://) mirror.
  - With O(mirror_url) the file is fetched from C(<mirror_url>/<name>/<file name>) instead of upstream
    (HTTP(S) base URL, C(file://) directory or C(s3://bucket/prefix)), for air-gapped builds.
  - A checksum mismatch fails the task and prints both hashes; the partial file is removed.
  - With O(record_lock=true) (used by C(make mirror)) the received file's sha256 is written into O(lock_file).
version_added: 0.1.0
author: trainstack maintainers (@trainstack)
options:
  name:
    description: Artifact name from the stack; keys the lock file and the mirror layout.
    type: str
    required: true
  url:
    description: Upstream URL from the stack.
    type: str
    required: true
  sha256:
    description: Pinned sha256 from the stack; omit or null where the stack does not know it.
    type: str
  dest:
    description: File to write.
    type: path
    required: true
  mirror_url:
    description: Mirror base (C(http(s)://), C(file://) or C(s3://)); when set, upstream is not contacted.
    type: str
  mirror_dir:
    description: Also copy the verified file into this mirror directory or C(s3://) bucket (C(make mirror)).
    type: str
  lock_file:
    description: The stack's lock file (JSON); read for a recorded sha256, written when O(record_lock=true).
    type: path
  record_lock:
    description: Record the received file's sha256 in O(lock_file).
    type: bool
    default: false
  stack_id:
    description: Stack id written into the lock file with O(record_lock).
    type: str
  verify:
    description:
      - The artifact's C(verify) from the stack. C(false) accepts this one download without a known sha256
        (the result says C(verified=false) and carries the reason); a sha256 in the lock file still applies.
    type: bool
    default: true
  unverified_reason:
    description: Why the stack accepts this artifact unverified; required with O(verify=false).
    type: str
  allow_http:
    description: The artifact's C(allow_http) from the stack; C(true) accepts a plain C(http://) URL.
    type: bool
    default: false
  timeout:
    description: Network timeout in seconds.
    type: int
    default: 60
  mode:
    description: File mode of O(dest).
    type: raw
"""

EXAMPLES = r"""
- name: Fetch the EFA installer through the build's mirror
  trainstack.cluster.artifact:
    name: aws-efa-installer
    url: https://efa-installer.amazonaws.com/aws-efa-installer-1.50.0.tar.gz
    sha256: "{{ artifact.sha256 }}"
    dest: /var/cache/trainstack/aws-efa-installer-1.50.0.tar.gz
    mirror_url: "http://10.77.0.1:8080/{{ lookup('trainstack.cluster.stack', part='id') }}"
"""

RETURN = r"""
sha256:
  description: sha256 of the file at dest.
  returned: success
  type: str
verified:
  description: Whether the file was checked against a pinned or locked sha256.
  returned: success
  type: bool
unverified_reason:
  description: The stack's reason for accepting the artifact unchecked.
  returned: when verified is false
  type: str
source:
  description: Where the bytes came from (mirror or upstream URL).
  returned: success
  type: str
size:
  description: File size in bytes.
  returned: success
  type: int
lock_changed:
  description: Whether the lock file was written.
  returned: when record_lock
  type: bool
"""

import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.trainstack.cluster.plugins.module_utils.artifact.artifact_fetch import (
    ArtifactError,
    Trust,
    fetch,
    load_lock,
    record_lock,
    upload_to_mirror,
)

SHA256_RE = re.compile(r"^[0-9a-fA-F]{64}$")


def _validate(module: AnsibleModule) -> None:
    """Bad input fails before any byte moves, naming the option."""
    params = module.params
    if params["sha256"] and not SHA256_RE.match(params["sha256"]):
        module.fail_json(msg=f"sha256: '{params['sha256']}' is not 64 hex digits")
    if params["record_lock"] and not (params["lock_file"] and params["stack_id"]):
        module.fail_json(msg="record_lock: needs lock_file and stack_id")
    if not re.match(r"^(https?|file|s3)://", params["url"]):
        module.fail_json(msg=f"url: '{params['url']}' must be http(s)://, file:// or s3://")
    if params["url"].startswith("http://") and not params["allow_http"]:
        module.fail_json(
            msg=f"url: '{params['url']}' is plain http://; refused unless the stack sets allow_http: true on "
            f"artifact {params['name']}"
        )
    if not params["verify"] and not (params["unverified_reason"] or "").strip():
        module.fail_json(msg=f"unverified_reason: required when verify is false (artifact {params['name']})")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "url": {"type": "str", "required": True},
            "sha256": {"type": "str"},
            "dest": {"type": "path", "required": True},
            "mirror_url": {"type": "str"},
            "mirror_dir": {"type": "str"},
            "lock_file": {"type": "path"},
            "record_lock": {"type": "bool", "default": False},
            "stack_id": {"type": "str"},
            "verify": {"type": "bool", "default": True},
            "unverified_reason": {"type": "str"},
            "allow_http": {"type": "bool", "default": False},
            "timeout": {"type": "int", "default": 60},
            "mode": {"type": "raw"},
        },
        supports_check_mode=True,
    )
    _validate(module)
    params = module.params
    try:
        lock = load_lock(params["lock_file"])
        result = fetch(
            params["name"],
            params["url"],
            params["dest"],
            trust=Trust(
                sha256=params["sha256"],
                verify=params["verify"],
                unverified_reason=params["unverified_reason"],
                allow_http=params["allow_http"],
            ),
            mirror=params["mirror_url"],
            lock=lock,
            timeout=params["timeout"],
            check_mode=module.check_mode,
            trust_on_first_use=params["record_lock"],
        )
        out = result.as_dict()
        if params["mirror_dir"] and not module.check_mode:
            out["mirrored_to"] = upload_to_mirror(
                params["mirror_dir"], params["name"], params["url"], result.dest
            )
        if params["record_lock"] and not module.check_mode:
            out["lock_changed"] = record_lock(params["lock_file"], params["stack_id"], result, params["url"])
            out["changed"] = out["changed"] or out["lock_changed"]
    except ArtifactError as exc:
        module.fail_json(msg=str(exc))
    if not module.check_mode and params["mode"] is not None:
        out["changed"] = module.set_fs_attributes_if_different(
            module.load_file_common_arguments({"path": params["dest"], "mode": params["mode"]}),
            out["changed"],
        )
    if not out["verified"] and not params["record_lock"]:
        out["unverified_reason"] = params["unverified_reason"]
        module.warn(
            f"artifact {params['name']} was downloaded WITHOUT checksum verification "
            f"(the stack marks it verify: false: {params['unverified_reason']})"
        )
    module.exit_json(**out)


if __name__ == "__main__":
    main()
