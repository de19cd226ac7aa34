# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Find a training stack by id and answer what it pins for one host, with the lock file's checksums.

Why this exists: every role needs "the stack's pin of my component for this OS/arch". Reading
``stacks/<id>.yml`` by path from each role spread the stack id's default, the path arithmetic and the lock
handling over a dozen copies. This module is the one place that knows where stacks live, which one is current
(``stacks/current``) and how a lock entry completes an artifact; stack_matrix stays the pure rule engine.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.artifact.artifact_fetch import locked_digest
from ansible_collections.trainstack.cluster.plugins.module_utils.files import strict_yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.stack.stack_matrix import (
    StackError,
    resolve,
    validate_stack,
)

# The collection root holds stacks/ (plugins/module_utils/stack/<this file> -> three levels up).
STACKS_DIR = Path(__file__).resolve().parents[3] / "stacks"
# The one place the current stack is named: a one-line marker beside the stack files.
CURRENT_MARKER = "current"
# Ansible's distribution fact -> the stack's OS prefix.
_OS_PREFIX = {"amazon": "amzn", "ubuntu": "ubuntu", "debian": "debian", "redhat": "rhel", "rocky": "rocky"}
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_VARIANT_RE = re.compile(r"^[a-z0-9]+$")


def _load_yaml(path: Path) -> Any:
    """Parse a YAML file, a repeated key refused. PyYAML is imported here, not at the top: the resolver runs
    on the controller, which has it, while module_utils must import on any target Python (ansible-test's
    import check)."""
    import yaml

    try:
        return strict_yaml.load(path)
    except yaml.YAMLError as err:
        raise StackError(f"{path}: not valid YAML: {err}") from err


def os_id(facts: Mapping[str, Any]) -> str:
    """Stack OS id from Ansible facts: Ubuntu keeps 'major.minor' (22.04), others use the major version."""
    distro = str(facts.get("distribution", "")).lower()
    prefix = _OS_PREFIX.get(distro)
    if prefix is None:
        raise StackError(f"distribution '{facts.get('distribution')}' is not in any stack")
    version = facts.get("distribution_version" if distro == "ubuntu" else "distribution_major_version")
    return f"{prefix}-{version}"


def stacks_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The stacks directory: the given one (tests, a fork's stacks), else the collection's own."""
    return Path(path) if path else STACKS_DIR


def current_stack_id(directory: Path) -> str:
    """The stack a host gets when nobody names one: the id in ``<stacks>/current``."""
    marker = directory / CURRENT_MARKER
    try:
        text = marker.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise StackError(f"{marker}: cannot read the current stack marker ({exc.strerror})") from exc
    if not _ID_RE.match(text):
        raise StackError(f"{marker}: '{text}' is not a stack id")
    return text


def available(directory: Path) -> list[str]:
    """Ids of the stack files in a directory (for the message that refuses an unknown one): the YAML files
    whose ``id`` is their own name (rules.yml and the instance catalog have none)."""
    found = []
    for path in sorted(directory.glob("*.yml")):
        data = _load_yaml(path)
        if isinstance(data, dict) and str(data.get("id")) == path.stem:
            found.append(path.stem)
    return found


def stack_path(directory: Path, stack_id: str) -> Path:
    """Path of one stack's file; an id that names no stack is refused with the ids that exist."""
    if not _ID_RE.match(stack_id) or not (directory / f"{stack_id}.yml").is_file():
        raise StackError(
            f"trainstack_stack={stack_id}: no such stack ({directory}/{stack_id}.yml); "
            f"available: {', '.join(available(directory))}"
        )
    return directory / f"{stack_id}.yml"


def load_stack(directory: Path, stack: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """The validated stack document: a parsed mapping passes through (a scenario that widens a shipped stack),
    an id or nothing (the current stack) is read from the directory. Errors name the file and the key."""
    if isinstance(stack, Mapping):
        validate_stack(stack)
        return dict(stack)
    stack_id = str(stack) if stack else current_stack_id(directory)
    path = stack_path(directory, stack_id)
    data = _load_yaml(path)
    if not isinstance(data, dict) or str(data.get("id")) != stack_id:
        found = data.get("id") if isinstance(data, dict) else None
        raise StackError(f"{path}: its id must be '{stack_id}' (the file name), found {found!r}")
    validate_stack(data, str(path))
    return data


def load_lock(directory: Path, stack_id: str) -> dict[str, Any]:
    """A stack's lock (``locks/<id>.lock.json``), or an empty one; a corrupt lock is an error."""
    path = directory / "locks" / f"{stack_id}.lock.json"
    if not path.is_file():
        return {"format": 1, "stack": stack_id, "artifacts": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise StackError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("artifacts"), dict):
        raise StackError(f"{path}: has no 'artifacts' mapping")
    return data


def load_rules(directory: Path) -> list[dict[str, Any]]:
    """The compatibility rules every stack is checked against (``rules.yml``)."""
    path = directory / "rules.yml"
    data = _load_yaml(path) if path.is_file() else None
    if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
        raise StackError(f"{path}: has no 'rules' list")
    return data["rules"]


def _with_lock(component: dict[str, Any], lock: Mapping[str, Any]) -> dict[str, Any]:
    """Fill an artifact's missing sha256 from the lock, only for the same URL; a stack digest always wins."""
    completed = []
    for art in component.get("artifacts") or []:
        digest = None if art.get("sha256") else locked_digest(dict(lock), art["name"], art["url"])
        completed.append({**art, "sha256": digest, "sha256_from": "lock"} if digest else art)
    return {**component, "artifacts": completed}


def pins(
    stack: Mapping[str, Any], lock: Mapping[str, Any], os_id: str, arch: str
) -> dict[str, dict[str, Any]]:
    """{component: pin} for one host: by_os merged, other arches' artifacts dropped, lock digests added."""
    return {name: _with_lock(comp, lock) for name, comp in resolve(stack, os_id, arch).items()}


def requirements_file(directory: Path, stack_id: str, variant: str) -> str:
    """Path of the hash-pinned Python requirements of a PyTorch variant (``locks/<id>.pytorch-<v>.txt``).

    The path is returned even when the file is missing: the pytorch role says which stack has no lock for it.
    """
    if not _VARIANT_RE.match(variant):
        raise StackError(
            f"requirements: variant '{variant}' must be lower-case letters and digits (cuda, cpu)"
        )
    return str(directory / "locks" / f"{stack_id}.pytorch-{variant}.txt")
