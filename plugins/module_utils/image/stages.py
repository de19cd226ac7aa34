# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The local image build's stages and their keys (make image-local, playbooks/build_image.yml).

Why: after any change the local build used to run every role of its flavour again, on a fresh debootstrap root
filesystem. A build is a chain: image_prepare, then the flavour's roles in order, each on what the ones before
it left. Cutting the chain into stages (one applied role each) and keying each stage by everything that can
change what it leaves behind lets a rebuild start from a snapshot of the last stage whose key is unchanged
and run only the stages after it. A key that misses an input would reuse a wrong root filesystem without a
word, so the inputs are chosen conservatively and listed here in one place:

* the seed (every stage): the base root filesystem's key (the LXC template's debootstrap key), the files of
  ``SEED_PATHS`` (the plugins every role calls, the template, image_prepare which always runs first, the
  build playbook), the stack document, the files of its locks (``stacks/locks/<id>.*``: artifact digests
  and the pytorch requirements), and the build's variables that reach every role;
* each stage: the previous stage's key (so a change to an early stage changes every key after it), its
  position, role name and components, the files of the role and of every role it reaches through
  ``meta/main.yml`` dependencies or a literal ``include_role``/``import_role``, and the files and variables
  of ``ROLE_INPUTS`` for that role (the pytorch role's test case locks, wheelhouse and test case list).

Files count by path, mode's executable bit and bytes; never by mtime, so a checkout or a copy keeps its
keys. Everything here is pure or reads files only; the snapshots themselves are stage_cache's.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Files (relative to the repository) in every stage's key: the plugins the roles call (modules, filters,
# lookups and module_utils are not traced role by role), the LXC template (what the base holds), the role
# that always runs before the first stage, and the playbook that wires it all.
SEED_PATHS = ("plugins", "packer/lxc", "roles/image_prepare", "playbooks/build_image.yml")
# Never part of a key: caches of Python and generated role documentation.
IGNORED_NAMES = ("__pycache__", "*.pyc", "README.md")
# Inputs a role reads from outside its own directory. pytorch bakes the test case environments from each
# case's manifest and locks (testcases/) and from the wheelhouse; which cases it bakes is a variable.
ROLE_INPUTS: Mapping[str, Mapping[str, Any]] = {
    "pytorch": {
        "files": ("testcases",),
        "patterns": ("gpu_targets.yml", "testcase.yml", "requirements*.lock"),
        "variables": ("pytorch_testcases", "pytorch_wheelhouse"),
    },
}
# The keys of include_role/import_role tasks that name another role.
_ROLE_INCLUDES = {
    "include_role",
    "import_role",
    "ansible.builtin.include_role",
    "ansible.builtin.import_role",
}
COLLECTION_PREFIX = "trainstack.cluster."


class StageError(ValueError):
    """A stage plan that cannot be made: the input and the rule are named."""


@dataclass(frozen=True)
class Stage:
    """One stage of a build: the role it applies (1-based ``index`` in the build's order) and its key."""

    index: int
    role: str
    key: str
    components: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The plan file's form of the stage."""
        return {"index": self.index, "role": self.role, "key": self.key, "components": list(self.components)}


def digest(value: Any) -> str:
    """sha256 of a JSON document with sorted keys: the same inputs give the same key on any machine."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _ignored(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in IGNORED_NAMES)


def _file_entry(path: Path, relative: str) -> list[str]:
    """[relative path, kind, sha256]: a symlink counts by its target, a file by its bytes and exec bit."""
    if path.is_symlink():
        return [relative, "link", hashlib.sha256(os.readlink(path).encode()).hexdigest()]
    kind = "exec" if os.access(path, os.X_OK) else "file"
    sha = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            sha.update(chunk)
    return [relative, kind, sha.hexdigest()]


def file_digests(root: Path, paths: Sequence[str], patterns: Sequence[str] = ()) -> list[list[str]]:
    """Every file under ``paths`` (relative to ``root``; files or directories), as [path, kind, sha256],
    sorted by path; with ``patterns``, only files whose name matches one. A path that does not exist is an
    error: a key that silently skipped a renamed directory would stop covering it."""
    found: list[list[str]] = []
    for top in paths:
        start = root / top
        if not start.exists() and not start.is_symlink():
            raise StageError(f"stage key input {top} does not exist under {root}")
        candidates = [start] if not start.is_dir() or start.is_symlink() else _walk(start)
        for path in candidates:
            if patterns and not any(fnmatch.fnmatch(path.name, p) for p in patterns):
                continue
            found.append(_file_entry(path, path.relative_to(root).as_posix()))
    return sorted(found)


def _walk(start: Path) -> list[Path]:
    """Files and symlinks under a directory, ignored names left out (sorted later by the caller)."""
    out: list[Path] = []
    for folder, dirs, files in os.walk(start):
        dirs[:] = [d for d in dirs if not _ignored(d)]
        out.extend(Path(folder, name) for name in files if not _ignored(name))
        out.extend(Path(folder, d) for d in dirs if Path(folder, d).is_symlink())
    return out


def _included_roles(node: Any) -> list[str]:
    """Literal role names of include_role/import_role tasks anywhere in a parsed task file."""
    names: list[str] = []
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key in _ROLE_INCLUDES and isinstance(value, Mapping) and isinstance(value.get("name"), str):
                names.append(value["name"])
            else:
                names.extend(_included_roles(value))
    elif isinstance(node, list):
        for item in node:
            names.extend(_included_roles(item))
    return names


def _dependency_names(meta: Any) -> list[str]:
    """meta/main.yml dependencies: a name, or a mapping with ``role`` (or ``name``)."""
    deps = meta.get("dependencies") if isinstance(meta, Mapping) else None
    names = []
    for dep in deps or []:
        name = (
            dep
            if isinstance(dep, str)
            else (dep.get("role") or dep.get("name"))
            if isinstance(dep, Mapping)
            else None
        )
        if isinstance(name, str):
            names.append(name)
    return names


def _local_role(name: str, roles_dir: Path) -> str | None:
    """The role of this collection a name refers to (FQCN or bare); None for a templated or foreign name."""
    bare = name[len(COLLECTION_PREFIX) :] if name.startswith(COLLECTION_PREFIX) else name
    if "{" in bare or "." in bare or not (roles_dir / bare).is_dir():
        return None
    return bare


def role_references(roles_dir: Path, role: str) -> list[str]:
    """Roles of this collection that ``role`` runs: its meta dependencies and the literal names of its
    include_role/import_role tasks. A templated name cannot be followed; the roles of this collection use
    none (tests/unit/image/test_image_stages.py holds them to it)."""
    import yaml  # the controller has PyYAML; module_utils must import on any target (ansible-test)

    base = roles_dir / role
    names: list[str] = []
    meta = base / "meta" / "main.yml"
    if meta.is_file():
        names.extend(_dependency_names(yaml.safe_load(meta.read_text(encoding="utf-8"))))
    for task_file in sorted((base / "tasks").glob("*.yml")) if (base / "tasks").is_dir() else []:
        names.extend(_included_roles(yaml.safe_load(task_file.read_text(encoding="utf-8"))))
    return sorted({local for name in names if (local := _local_role(name, roles_dir)) and local != role})


def role_closure(roles_dir: Path, role: str) -> list[str]:
    """``role`` and every role it reaches through dependencies and includes, transitively, sorted."""
    if not (roles_dir / role).is_dir():
        raise StageError(f"stage role {role} is not a role of this collection ({roles_dir})")
    seen: set[str] = set()
    todo = [role]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        todo.extend(role_references(roles_dir, current))
    return sorted(seen)


def unpinned_components(entry: Mapping[str, Any], pinned: Mapping[str, Any]) -> list[str]:
    """The components of a flavour entry the stack pins no version of for the host's OS/arch: a role with
    any is skipped, not applied (the one rule for image_prepare's plan and the stage plan)."""
    return [c for c in entry.get("components", []) if c not in pinned]


def flatten(items: Any) -> list[Any]:
    """Jinja's ``flatten``: a flavour is a list of entries and lists of entries (YAML anchors)."""
    if not isinstance(items, list):
        return [items]
    return [leaf for item in items for leaf in flatten(item)]


def applied_entries(flavour_entries: Any, pinned: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The entries of a flavour that a build on this OS/arch applies, in order (the stages)."""
    return [dict(entry) for entry in flatten(flavour_entries) if not unpinned_components(entry, pinned)]


def seed_key(
    base_key: str,
    seed_files: Sequence[Sequence[str]],
    stack: Mapping[str, Any],
    lock_files: Sequence[Sequence[str]],
    variables: Mapping[str, Any],
) -> str:
    """The key every stage chains from: what the root filesystem is before the first stage runs, and what
    reaches every stage. ``base_key`` is empty only when there is no base to name, which is refused."""
    if not base_key:
        raise StageError(
            "stage seed: the base root filesystem's key is empty (the LXC template's --print-base-key)"
        )
    return digest(
        {
            "base": base_key,
            "files": [list(entry) for entry in seed_files],
            "stack": dict(stack),
            "locks": [list(entry) for entry in lock_files],
            "variables": dict(variables),
        }
    )


def stage_keys(
    seed: str,
    entries: Sequence[Mapping[str, Any]],
    role_inputs: Mapping[str, Mapping[str, Any]],
) -> list[Stage]:
    """The stages of a build, each keyed by the previous key (the seed for the first), its position, its
    entry (role and components) and its role's inputs (``role_inputs[role]``: ``files`` and ``variables``).
    Position counts because a role applied after another leaves a different tree than before it."""
    stages: list[Stage] = []
    previous = seed
    for index, entry in enumerate(entries, start=1):
        role = str(entry["role"])
        components = tuple(str(c) for c in entry.get("components", []))
        if role not in role_inputs:
            raise StageError(f"stage {index} ({role}): no inputs were gathered for this role")
        inputs = role_inputs[role]
        key = digest(
            {
                "previous": previous,
                "index": index,
                "role": role,
                "components": list(components),
                "files": [list(e) for e in inputs.get("files", [])],
                "variables": dict(inputs.get("variables", {})),
            }
        )
        stages.append(Stage(index=index, role=role, key=key, components=components))
        previous = key
    return stages


def role_input(
    repo: Path, role: str, variables: Mapping[str, Any], wheels: Sequence[Sequence[Any]] = ()
) -> dict[str, Any]:
    """What one stage's key covers besides the chain: the files of the role and of the roles it reaches,
    the files of ``ROLE_INPUTS[role]``, and its variables (only those ``ROLE_INPUTS`` names; a variable no
    role reads must not invalidate snapshots). The wheelhouse counts by the names and sizes of its files
    (``wheels``), as the container layers' keys count it: hashing GBs of wheels on every build would cost
    more than the rebuild it saves, and a wheel's name carries its version."""
    roles_dir = repo / "roles"
    files = file_digests(repo, [f"roles/{name}" for name in role_closure(roles_dir, role)])
    extra = ROLE_INPUTS.get(role, {})
    if extra.get("files"):
        files = sorted(files + file_digests(repo, extra["files"], extra.get("patterns", ())))
    own_vars = {name: variables.get(name) for name in extra.get("variables", ())}
    if "pytorch_wheelhouse" in own_vars:
        own_vars["pytorch_wheelhouse"] = (
            sorted([str(n), int(s)] for n, s in wheels) if own_vars["pytorch_wheelhouse"] else []
        )
    return {"files": files, "variables": own_vars}


def wheelhouse_listing(path: str) -> list[list[Any]]:
    """[name, size] of each file at the top of a wheelhouse (hidden files such as make's stamp left out)."""
    if not path:
        return []
    folder = Path(path)
    if not folder.is_dir():
        raise StageError(f"pytorch_wheelhouse={path} is not a directory")
    return sorted(
        [p.name, p.stat().st_size] for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")
    )


def check_rebuild(stages: Sequence[Stage], rebuild: str) -> list[str]:
    """Why ``rebuild`` (the role from which every stage runs again) cannot be honoured ([] when it can)."""
    if rebuild and rebuild not in [s.role for s in stages]:
        roles = ", ".join(s.role for s in stages) or "none"
        return [f"IMAGE_STAGE_REBUILD={rebuild} is not a stage of this build (its stages: {roles})"]
    return []
