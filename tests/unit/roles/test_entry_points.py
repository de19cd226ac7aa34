"""One entry-point vocabulary for every role.

The rule: a role's entry points are the keys of its meta/argument_specs.yml (the only task files a caller
may name in `tasks_from`). Their names come from one vocabulary:

- `install`: image time (packages, binaries, no host identity); playbooks/build_image.yml calls every role
  of an image through it;
- `configure`: boot time (per-host configuration, services);
- `verify`: read-only checks;
- `main`: install then configure (it imports both where both exist).

A few roles have actions that are none of these phases; they are listed in ACTIONS with the reason. Every
other file in tasks/ is a helper: it must be imported or included by a task file of the same role, and it
may not carry a vocabulary name.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.support import REPO

VOCABULARY = {"main", "install", "configure", "verify"}
ACTIONS = {
    # Controller-side removal of a cluster's AWS resources, found by its tag.
    "aws_foundation": {"teardown"},
    # NVIDIA's signed CUDA repository, shared with dcgm, nccl and nvidia_driver through include_role; one
    # toolkit laid out from NVIDIA's PyPI wheels in any directory (cuda_source=wheels: the lab's builds).
    "cuda": {"repo", "wheels"},
    # The last step of an image build, after the manifest: strip host identity.
    "image_selfcheck": {"generalize"},
    # Controller-side lifecycle of the local lab (power: an elastic node made or removed at Slurm's request).
    "lab": {"down", "status", "remove_nodes", "power"},
    # Cluster-wide checks run once before any node changes, the cluster's registration in slurmdbd and its
    # people's associations.
    "slurm": {"validate"},
    "slurm_accounting": {"validate", "register", "associations"},
    # The user list is checked on every host before the directory or accounting changes.
    "cluster_users": {"validate"},
}
ROLES = sorted(p for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())
INCLUDE_KEYS = (
    "ansible.builtin.import_tasks",
    "ansible.builtin.include_tasks",
    "import_tasks",
    "include_tasks",
)


def entry_points(role: Path) -> set[str]:
    """The entry points a role declares (meta/argument_specs.yml)."""
    return set(yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"])


def _tasks(items: list | None) -> list[dict]:
    """Every task of a task file, blocks (and their rescue/always sections) flattened."""
    found: list[dict] = []
    for item in items or []:
        nested = [part for key in ("block", "rescue", "always") for part in item.get(key) or []]
        found.extend(_tasks(nested) if nested else [item])
    return found


def _included(task: dict) -> str | None:
    for key in INCLUDE_KEYS:
        value = task.get(key)
        if value is not None:
            return value if isinstance(value, str) else value.get("file")
    return None


def included_patterns(role: Path) -> list[re.Pattern[str]]:
    """What the role's task files import or include, as patterns (a templated name covers what it matches)."""
    patterns = []
    for path in (role / "tasks").glob("*.yml"):
        for task in _tasks(yaml.safe_load(path.read_text())):
            name = _included(task)
            if name:
                parts = re.split(r"\{\{.*?\}\}", Path(name).name)
                patterns.append(re.compile("^" + ".+".join(re.escape(p) for p in parts) + "$"))
    return patterns


def top_level_imports(path: Path) -> list[str]:
    return [
        task.get("ansible.builtin.import_tasks")
        for task in yaml.safe_load(path.read_text()) or []
        if task.get("ansible.builtin.import_tasks")
    ]


def entry_point_problems(role: Path) -> list[str]:
    """Every way a role's tasks/ breaks the rule, in words."""
    declared = entry_points(role)
    files = {p.stem for p in (role / "tasks").glob("*.yml")}
    allowed = VOCABULARY | ACTIONS.get(role.name, set())
    problems = [
        f"entry point {e} is not in the vocabulary {sorted(allowed)}" for e in sorted(declared - allowed)
    ]
    problems += [f"entry point {e} has no tasks/{e}.yml" for e in sorted(declared - files)]
    if "main" not in declared:
        problems.append("declares no main entry point")
    problems += [
        f"tasks/{f}.yml carries an entry-point name but is not declared in meta/argument_specs.yml"
        for f in sorted((files & VOCABULARY) - declared)
    ]
    patterns = included_patterns(role)
    problems += [
        f"tasks/{f}.yml is neither an entry point nor included by a task file of the role"
        for f in sorted(files - declared)
        if not any(p.match(f"{f}.yml") for p in patterns)
    ]
    if {"install", "configure"} <= declared:
        imports = top_level_imports(role / "tasks" / "main.yml")
        problems += [
            f"main.yml does not import {f}" for f in ("install.yml", "configure.yml") if f not in imports
        ]
    return problems


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_role_tasks_follow_the_entry_point_vocabulary(role: Path) -> None:
    assert entry_point_problems(role) == []


def test_every_image_role_has_an_install_entry_point() -> None:
    play = yaml.safe_load((REPO / "playbooks" / "build_image.yml").read_text())
    build = next(p for p in play if p.get("hosts") == "all")
    flavours = build["vars"]["image_flavours"]
    names = {e["role"] for entries in flavours.values() for e in _flatten(entries)}
    missing = [n for n in sorted(names) if "install" not in entry_points(REPO / "roles" / n)]
    assert missing == []
    # Each role is one stage (playbooks/tasks/image_stage.yml), applied through its install entry point.
    stages = next(t for t in build["tasks"] if t["name"] == "Apply the flavour's roles, one stage each")
    stage = yaml.safe_load((REPO / "playbooks" / stages["ansible.builtin.include_tasks"]).read_text())
    apply = next(t for t in stage if t["name"] == "Apply the role of this stage")
    assert apply["ansible.builtin.include_role"]["tasks_from"] == "install"


def _flatten(entries: list) -> list[dict]:
    return [e for item in entries for e in (_flatten(item) if isinstance(item, list) else [item])]


def _callers() -> list[tuple[str, str, str]]:
    """(file, role, tasks_from) of every role call naming tasks_from in playbooks/ and molecule/."""
    found = []
    for path in [*(REPO / "playbooks").rglob("*.yml"), *(REPO / "molecule").rglob("*.yml")]:
        for match in re.finditer(
            r"name: \"?trainstack\.cluster\.(\w+)\"?\n(?:\s+\w+:.*\n)*?"
            r"\s+tasks_from: \"?([\w.{}' |()-]+?)\"?\n",
            path.read_text(),
        ):
            found.append((str(path.relative_to(REPO)), match.group(1), match.group(2)))
    return found


@pytest.mark.parametrize("caller", _callers(), ids=lambda c: f"{c[0]}:{c[1]}:{c[2]}")
def test_callers_name_declared_entry_points(caller: tuple[str, str, str]) -> None:
    _caller_file, role, entry = caller
    assert entry.removesuffix(".yml") in entry_points(REPO / "roles" / role)


def test_the_rule_catches_a_helper_nobody_includes(tmp_path: Path) -> None:
    """The checker itself: an orphan helper, an undeclared vocabulary file and a main that skips configure."""
    role = tmp_path / "demo"
    (role / "tasks").mkdir(parents=True)
    (role / "meta").mkdir()
    specs = {
        "argument_specs": {e: {"short_description": e} for e in ("main", "install", "configure", "boot")}
    }
    (role / "meta" / "argument_specs.yml").write_text(yaml.safe_dump(specs))
    for name in ("install", "configure", "boot", "orphan", "verify"):
        (role / "tasks" / f"{name}.yml").write_text("---\n- name: x\n  ansible.builtin.debug:\n")
    (role / "tasks" / "main.yml").write_text("---\n- name: i\n  ansible.builtin.import_tasks: install.yml\n")
    assert entry_point_problems(role) == [
        "entry point boot is not in the vocabulary ['configure', 'install', 'main', 'verify']",
        "tasks/verify.yml carries an entry-point name but is not declared in meta/argument_specs.yml",
        "tasks/orphan.yml is neither an entry point nor included by a task file of the role",
        "tasks/verify.yml is neither an entry point nor included by a task file of the role",
        "main.yml does not import configure.yml",
    ]
