"""The current stack, named in one place for every test.

``stacks/current`` names the stack a host gets when nobody names one (the ``trainstack.cluster.stack`` lookup
and ``trainstack_stack`` default to it). Tests that mean "whatever stack is current" take its id from here (or
from the ``current_stack_id`` fixture of tests/conftest.py), never as a literal, so that rolling the stack
forward edits ``stacks/current`` and the example specs, not the tests. Tests of one particular stack's
contents name that stack by its id.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from .collection import REPO

STACKS_DIR = REPO / "stacks"


def read_current_stack_id(stacks_dir: Path = STACKS_DIR) -> str:
    """The id ``<stacks_dir>/current`` names (the collection's own stacks by default)."""
    return (stacks_dir / "current").read_text().strip()


# The current stack's id and file, read once when the tests load.
CURRENT_STACK_ID = read_current_stack_id()
CURRENT_STACK_FILE = STACKS_DIR / f"{CURRENT_STACK_ID}.yml"
# Every stack file the collection ships (current, previous, retired, candidate), by id.
SHIPPED_STACK_IDS = tuple(sorted(path.stem for path in STACKS_DIR.glob("ts-*.yml")))


def current_stack() -> dict:
    """The stack the roles are tested against, parsed."""
    return yaml.safe_load(CURRENT_STACK_FILE.read_text())


def stack_artifact(component: str, arch: str = "x86_64") -> dict:
    """The current stack's first artifact of a component for one architecture."""
    arts = current_stack()["components"][component]["artifacts"]
    return next(a for a in arts if a.get("arch", arch) == arch)
