"""Every role declares its interface, and its README is generated from that declaration."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import REPO

ROLES = sorted(p for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_role_has_argument_specs_for_every_entry_point(role: Path) -> None:
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    assert specs, f"{role.name} declares no entry point"
    for entry, spec in specs.items():
        assert spec.get("short_description"), f"{role.name}:{entry} has no short_description"
        for name, opt in (spec.get("options") or {}).items():
            assert opt.get("description"), f"{role.name}:{entry}:{name} is undocumented"


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_public_variables_are_prefixed(role: Path) -> None:
    defaults = role / "defaults" / "main.yml"
    if not defaults.exists():
        pytest.skip(f"{role.name} has no defaults")
    names = (yaml.safe_load(defaults.read_text()) or {}).keys()
    assert [n for n in names if not n.startswith(f"{role.name}_")] == []


def test_role_readmes_are_generated_and_current() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "role_docs.py"), "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


PACKAGE_MODULES = {"ansible.builtin.apt", "ansible.builtin.package", "ansible.builtin.dnf"}


def _tasks(items: list[dict]) -> list[dict]:
    """Every task of a task file, blocks (and their rescue/always sections) flattened."""
    found = []
    for item in items or []:
        nested = [part for key in ("block", "rescue", "always") for part in item.get(key) or []]
        found.extend(_tasks(nested) if nested else [item])
    return found


def test_package_tasks_retry_a_mirror_that_drops_a_connection() -> None:
    """One dropped connection to a package mirror or proxy must not fail an image build.

    apt marks a host unreachable for the rest of a run after one failed connect (seen once in the lab:
    86 packages "Unable to connect" while the proxy served other containers), so the retry is Ansible's.
    """
    missing = []
    for path in sorted((REPO / "roles").glob("*/tasks/*.yml")):
        for task in _tasks(yaml.safe_load(path.read_text())):
            if PACKAGE_MODULES & task.keys():
                register = task.get("register", "")
                if not (register and task.get("until") == f"{register} is succeeded" and task.get("retries")):
                    missing.append(f"{path.relative_to(REPO)}: {task.get('name')}")
    assert missing == []


# Variables any role may read besides its own: the collection-wide ones of docs/architecture.md.
COLLECTION_VARIABLES = ("trainstack_stack", "trainstack_shared_dir", "trainstack_proxy_env")


@pytest.mark.parametrize("role", [r for r in ROLES if r.name != "lab"], ids=lambda r: r.name)
def test_product_roles_read_no_lab_variable(role: Path) -> None:
    """The lab is one inventory among many: what it needs (its proxy) reaches roles as collection vars."""
    found = sorted(
        f"{path.relative_to(REPO)}: {name}"
        for path in role.rglob("*")
        if path.is_file() and path.suffix in {".yml", ".yaml", ".j2", ".py", ".sh"}
        for name in set(re.findall(r"\b(?:trainstack_lab_\w+|lab_[a-z]\w*)", path.read_text()))
    )
    assert not found, f"{role.name} reads lab variables (use {', '.join(COLLECTION_VARIABLES)}): {found}"
