"""Every role declares its interface, and its README is generated from that declaration."""

from __future__ import annotations

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
