#!/usr/bin/python
# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Ansible module: mark the lab's directories as its own, and remove only what carries that mark."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lab_paths
short_description: Mark the lab's directories, and remove only paths that carry the lab's mark
description:
  - With O(state=marked), writes the mark file into each listed directory (which must exist), so that a later
    O(state=absent) knows the directory for the lab's. A directory that another lab marked is refused, since
    two labs sharing one state directory would take each other's files away.
  - With O(state=absent), removes, as root, the directories and files that C(make lab-down) takes away (the
    lab's state, shared and run directories, its inventory file). A mistyped variable must not turn that
    into C(rm -rf /etc/ssh), so each path must prove it is this lab's before anything goes.
  - "A directory is this lab's when it holds the file O(marker) whose text is C(trainstack-lab: <owner>) (the
    lab role writes it when it creates the directory), or when it lies inside another listed directory that
    is. A file is this lab's when one of its first five lines ends with C(trainstack-lab: <owner>) (the lab's
    inventory template writes that line). A path that does not exist is already gone."
  - Every path is checked first. When any is refused, the task fails naming each refused path and why, and
    nothing is marked or removed.
version_added: 0.1.0
author: trainstack maintainers (@trainstack)
options:
  paths:
    description: Absolute paths to mark (directories) or to remove (directories or files).
    type: list
    elements: path
    required: true
  state:
    description: C(marked) writes the mark into each directory; C(absent) removes each path.
    type: str
    choices: [absent, marked]
    default: absent
  owner:
    description:
      - The lab whose mark a path must carry, named by its bridge (C(lab_bridge)). Every lab on a host has a
        bridge of its own, and the molecule scenarios, which add nodes to the lab they join under another
        C(owner), share its bridge and its directories with it.
    type: str
    required: true
  marker:
    description: Name of the mark file inside a directory.
    type: str
    default: .trainstack-lab
notes:
  - Supports check mode (reports what would change, changes nothing).
"""

EXAMPLES = r"""
- name: Mark the directories lab-up made
  trainstack.cluster.lab_paths:
    owner: tslab0
    state: marked
    paths:
      - /var/lib/trainstack/lab
      - /run/trainstack-lab

- name: Remove the lab's state and inventory
  trainstack.cluster.lab_paths:
    owner: tslab0
    paths:
      - /var/lib/trainstack/lab
      - /run/trainstack-lab
      - /srv/trainstack/inventories/local/hosts.yml
"""

RETURN = r"""
removed:
  description: The paths removed (in check mode, those that would be); paths already absent are not listed.
  returned: when O(state=absent)
  type: list
  elements: str
marked:
  description: The directories whose mark file was written (in check mode, would be).
  returned: when O(state=marked)
  type: list
  elements: str
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule

HEAD_LINES = 5


def mark_text(owner: str) -> str:
    """The text that marks a path as the lab's: in a directory's mark file, or at the end of a file's line."""
    return f"trainstack-lab: {owner}"


def _dir_is_marked(path: str, marker: str, owner: str) -> bool:
    """Whether the directory holds the mark file naming this lab (a link to one does not count)."""
    mark = os.path.join(path, marker)
    if os.path.islink(mark) or not os.path.isfile(mark):
        return False
    with open(mark, encoding="utf-8", errors="replace") as handle:
        return handle.read().strip() == mark_text(owner)


def _file_is_marked(path: str, owner: str) -> bool:
    """Whether one of the file's first lines ends with the mark (a comment line in YAML or INI)."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        head = [handle.readline().rstrip("\n") for _line in range(HEAD_LINES)]
    return any(line.endswith(mark_text(owner)) for line in head)


def _inside(path: str, root: str) -> bool:
    """Whether ``path`` lies strictly inside ``root`` (both normalised, absolute)."""
    return path != root and path.startswith(root.rstrip("/") + "/")


def _normal(path: str) -> str:
    """The path with '.', '..' and repeated or trailing '/' resolved as text (a role's default may be written
    from its role_path), so that the mark is looked for where the path really leads."""
    return os.path.normpath(path) if os.path.isabs(path) else path


def refusal(path: str, owned_dirs: list[str], marker: str, owner: str) -> str | None:
    """Why ``path`` may not be removed, or None when it may (absent, marked, or inside an owned directory)."""
    if not os.path.isabs(path) or path == "/":
        return "is not an absolute path other than '/'"
    if not os.path.lexists(path) or any(_inside(path, root) for root in owned_dirs):
        return None
    if os.path.islink(path):
        return "is a symbolic link; the lab makes none of the paths it removes"
    if os.path.isdir(path):
        if _dir_is_marked(path, marker, owner):
            return None
        return f"holds no {marker} file reading '{mark_text(owner)}', so the lab did not make it"
    if _file_is_marked(path, owner):
        return None
    mark = mark_text(owner)
    return f"has no line ending in '{mark}' in its first {HEAD_LINES}, so the lab did not write it"


def plan(paths: list[str], marker: str, owner: str) -> tuple[list[str], list[str]]:
    """(paths to remove, refusals): marked directories first, so that what lies inside one counts as owned."""
    normalised = [_normal(path) for path in paths]
    owned_dirs = [
        path
        for path in normalised
        if os.path.isdir(path) and not os.path.islink(path) and _dir_is_marked(path, marker, owner)
    ]
    refusals = []
    for path in normalised:
        why = refusal(path, owned_dirs, marker, owner)
        if why:
            refusals.append(f"{path} {why}.")
    remove = [path for path in normalised if os.path.lexists(path)]
    return remove, refusals


def mark_plan(paths: list[str], marker: str, owner: str) -> tuple[list[str], list[str]]:
    """(directories whose mark is missing, refusals): each path must be an existing directory, not a link, and
    not marked by another lab."""
    missing, refusals = [], []
    for path in (_normal(path) for path in paths):
        mark = os.path.join(path, marker)
        if os.path.islink(path) or not os.path.isdir(path):
            refusals.append(f"{path} is not a directory.")
        elif os.path.islink(mark) or (os.path.lexists(mark) and not os.path.isfile(mark)):
            refusals.append(f"{mark} is not a plain file.")
        elif not os.path.exists(mark):
            missing.append(path)
        elif not _dir_is_marked(path, marker, owner):
            with open(mark, encoding="utf-8", errors="replace") as handle:
                found = handle.read().strip()[:80]
            refusals.append(f"{path} is marked '{found}': another lab's, or not a lab's.")
    return missing, refusals


def _write_mark(path: str, marker: str, owner: str) -> None:
    """Write the mark file (0644: the lab's nodes read the shared directory as other users)."""
    mark = os.path.join(path, marker)
    with open(mark, "w", encoding="utf-8") as handle:
        handle.write(mark_text(owner) + "\n")
    os.chmod(mark, 0o644)


def _remove(path: str) -> None:
    """Remove a directory tree or a file; a path an earlier removal already took is fine."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _mark(module: AnsibleModule) -> None:
    """state=marked: write the missing marks, or fail naming every refused directory and write none."""
    params = module.params
    missing, refusals = mark_plan(params["paths"], params["marker"], params["owner"])
    if refusals:
        module.fail_json(msg=" ".join(refusals) + " No mark was written.", refused=refusals)
    if not module.check_mode:
        for path in missing:
            _write_mark(path, params["marker"], params["owner"])
    module.exit_json(changed=bool(missing), marked=missing)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "list", "elements": "path", "required": True},
            "owner": {"type": "str", "required": True},
            "marker": {"type": "str", "default": ".trainstack-lab"},
            "state": {"type": "str", "choices": ["absent", "marked"], "default": "absent"},
        },
        supports_check_mode=True,
    )
    params = module.params
    if "/" in params["marker"] or params["marker"] in ("", ".", ".."):
        module.fail_json(msg=f"marker '{params['marker']}' must be a plain file name.")
    if params["state"] == "marked":
        _mark(module)
    remove, refusals = plan(params["paths"], params["marker"], params["owner"])
    if refusals:
        module.fail_json(
            msg="lab-down removes only what the lab made: " + " ".join(refusals) + " Nothing was removed.",
            refused=refusals,
        )
    if not module.check_mode:
        for path in remove:
            _remove(path)
    module.exit_json(changed=bool(remove), removed=remove)


if __name__ == "__main__":
    main()
