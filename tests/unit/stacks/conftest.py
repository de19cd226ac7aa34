"""Fixtures of the stack-file tests: the shipped stacks and rules, and the collection on sys.path."""

import sys
from pathlib import Path

import pytest
import yaml

from tests.support import CURRENT_STACK_FILE, REPO

COLLECTIONS = REPO / ".cache" / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

STACKS = REPO / "stacks"
STACK_FILES = sorted(STACKS.glob("ts-*.yml"))


@pytest.fixture(params=STACK_FILES, ids=lambda p: p.stem)
def stack_file(request) -> Path:
    return request.param


@pytest.fixture
def current_stack() -> dict:
    """The current stack, parsed afresh for each test so mutations stay local."""
    return yaml.safe_load(CURRENT_STACK_FILE.read_text())


@pytest.fixture(scope="session")
def rules() -> list:
    return yaml.safe_load((STACKS / "rules.yml").read_text())["rules"]
