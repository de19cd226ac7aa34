#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module: write a lab node's files (container config, identity, proxy settings) in one step."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lab_node_files
short_description: Write the files that make a lab container a node, changing only those that differ
description:
  - Writes a set of files under one container directory (its LXC C(config), its root filesystem's hostname,
    hosts, proxy and retry settings, certificate authorities, the lab key) and creates the node's own SSH host
    keys when it has none. A file whose bytes and mode are already right is left alone, so a lab that is
    already up reports no change.
  - One module run per node instead of one per file. Bringing up a lab that is already up is most of what
    the lab's tests and the molecule scenarios spend on it, and each Ansible task costs a module run.
  - Every path is checked before anything is written (relative, inside O(root), no C(..) component). A bad
    entry fails the task naming it and writes nothing.
version_added: 0.1.0
author: trainstack maintainers (@trainstack)
options:
  root:
    description: The container's directory (for example C(/var/lib/lxc/ts-head)); it must exist.
    type: path
    required: true
  files:
    description: The files to write, relative to O(root).
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description:
          - Path relative to O(root); missing parent directories are created (mode 0755).
          - A path that ends in C(/) is a directory, and the file keeps the name of its O(files[].src).
        type: str
        required: true
      content:
        description: The file's text. Exactly one of O(files[].content) and O(files[].src) is given.
        type: str
      src:
        description: A file on the lab host whose bytes are copied.
        type: path
      mode:
        description: File mode, as an octal string.
        type: str
        default: "0644"
  host_keys:
    description:
      - A root filesystem, relative to O(root), whose SSH host keys C(ssh-keygen -A) makes when
        C(etc/ssh/ssh_host_ed25519_key) is missing there (images carry no host identity). Empty for none.
    type: str
    default: ""
notes:
  - Supports check mode (reports what would change, writes nothing).
"""

EXAMPLES = r"""
- name: Write the node's files
  trainstack.cluster.lab_node_files:
    root: /var/lib/lxc/ts-compute1
    host_keys: rootfs
    files:
      - path: rootfs/etc/hostname
        content: "ts-compute1\n"
      - path: rootfs/root/.ssh/authorized_keys
        content: "{{ lab_public_key }}"
        mode: "0600"
"""

RETURN = r"""
written:
  description: The paths (relative to O(root)) that were written, or would be in check mode.
  returned: success
  type: list
  elements: str
host_keys_made:
  description: Whether the node's SSH host keys were made (or would be, in check mode).
  returned: success
  type: bool
"""

import os
import stat
import tempfile
from pathlib import PurePosixPath

from ansible.module_utils.basic import AnsibleModule

HOST_KEY = "etc/ssh/ssh_host_ed25519_key"


def _relative(value: str, what: str) -> PurePosixPath:
    """A path inside the root: anything that could leave it is refused, naming the entry."""
    path = PurePosixPath(value)
    if not value or path.is_absolute() or ".." in path.parts or path == PurePosixPath("."):
        raise ValueError(f"{what}={value!r} must be a relative path inside root, without '..'")
    return path


def _mode(value: str, where: str) -> int:
    """The octal mode string as a number (only permission bits)."""
    try:
        mode = int(str(value), 8)
    except ValueError:
        raise ValueError(f"{where}.mode={value!r} must be an octal string such as '0644'") from None
    if mode > 0o7777:
        raise ValueError(f"{where}.mode={value!r} has bits beyond 07777")
    return mode


def _wanted(entry: dict, index: int) -> tuple[PurePosixPath, bytes, int]:
    """One entry checked and resolved to (path, bytes, mode) before anything is written."""
    where = f"files[{index}]"
    if (entry.get("content") is None) == (entry.get("src") is None):
        raise ValueError(f"{where} ({entry['path']}): give exactly one of content and src")
    name = entry["path"]
    if name.endswith("/"):
        if entry.get("src") is None:
            raise ValueError(f"{where}.path={name!r} names a directory: only a src file can go into it")
        name += os.path.basename(entry["src"])
    path = _relative(name, f"{where}.path")
    if entry.get("src") is not None:
        try:
            with open(entry["src"], "rb") as source:
                data = source.read()
        except OSError as err:
            raise ValueError(f"{where}.src={entry['src']!r} cannot be read: {err.strerror}") from None
    else:
        data = entry["content"].encode()
    return path, data, _mode(entry.get("mode") or "0644", where)


def _differs(target: str, data: bytes, mode: int) -> bool:
    """Whether the file is missing, holds other bytes or has another mode."""
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return True
    if not stat.S_ISREG(info.st_mode) or stat.S_IMODE(info.st_mode) != mode or info.st_size != len(data):
        return True
    with open(target, "rb") as current:
        return current.read() != data


def _write(target: str, data: bytes, mode: int) -> None:
    """Replace the file atomically: a node booting meanwhile sees the old file or the new one, never half."""
    directory = os.path.dirname(target)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".trainstack-")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def main() -> None:
    """Check every entry, then write those that differ and make missing host keys."""
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "files": {
                "type": "list",
                "elements": "dict",
                "required": True,
                "options": {
                    "path": {"type": "str", "required": True},
                    "content": {"type": "str"},
                    "src": {"type": "path"},
                    "mode": {"type": "str", "default": "0644"},
                },
            },
            # A path inside the container directory, not key material.
            "host_keys": {"type": "str", "default": "", "no_log": False},
        },
        supports_check_mode=True,
    )
    root = module.params["root"]
    if not os.path.isdir(root):
        module.fail_json(msg=f"root={root!r} is not a directory")
    try:
        wanted = [_wanted(entry, index) for index, entry in enumerate(module.params["files"])]
        keys_root = _relative(module.params["host_keys"], "host_keys") if module.params["host_keys"] else None
    except ValueError as err:
        module.fail_json(msg=str(err))

    written = []
    for path, data, mode in wanted:
        target = os.path.join(root, str(path))
        if _differs(target, data, mode):
            written.append(str(path))
            if not module.check_mode:
                _write(target, data, mode)

    keys_made = keys_root is not None and not os.path.exists(os.path.join(root, str(keys_root), HOST_KEY))
    if keys_made and not module.check_mode:
        rc, _out, err = module.run_command(["ssh-keygen", "-A", "-f", os.path.join(root, str(keys_root))])
        if rc != 0:
            module.fail_json(msg=f"ssh-keygen -A failed: {err.strip()}", written=written)
    module.exit_json(changed=bool(written) or keys_made, written=written, host_keys_made=keys_made)


if __name__ == "__main__":
    main()
