"""The current stack's id is written in one place, stacks/current: no test file names it.

Tests about whatever stack is current take the id from tests.support (CURRENT_STACK_ID, current_stack,
CURRENT_STACK_FILE) or the current_stack_id fixture, so rolling the stack forward (a new stacks/<id>.yml,
stacks/current naming it, the example specs under inventories/aws/ naming it) needs no test edit. Tests of one
particular stack's contents name that stack by its id; once it is no longer current that id is not the one
this test looks for.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support import CURRENT_STACK_ID, REPO, read_current_stack_id

TESTS = REPO / "tests"
# Recorded outputs that embed the current id because the example specs name the current stack; their tests
# compare against them and rewrite them on request (TRAINSTACK_WRITE_GOLDENS=1), so a roll rewrites these
# instead of editing a test.
GOLDENS = (
    TESTS / "data" / "cluster_playbooks",
    TESTS / "unit" / "plugins" / "modules" / "fixtures" / "cluster_module_renders.json",
)
# Test files that may name the current stack by its id: tests of one stack's contents or of the roll itself,
# each with the reason. None does today.
ALLOWED: dict[str, str] = {}


def files_naming(stack_id: str, root: Path = TESTS) -> list[str]:
    """The files under ``root`` (posix paths below ``root``), goldens aside, that contain ``stack_id`` as a
    whole id: in a tag or a name (``trainstack-<id>-...``), not as the start of a longer one."""
    pattern = re.compile(rf"(?<![A-Za-z0-9]){re.escape(stack_id)}(?!\d)")
    found = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        if any(path == golden or golden in path.parents for golden in GOLDENS):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if pattern.search(text):
            found.append(path.relative_to(root).as_posix())
    return found


def test_the_current_stack_id_is_read_from_stacks_current() -> None:
    assert read_current_stack_id() == CURRENT_STACK_ID
    assert (REPO / "stacks" / f"{CURRENT_STACK_ID}.yml").is_file()


def test_no_test_file_names_the_current_stack() -> None:
    named = [f"tests/{path}" for path in files_naming(CURRENT_STACK_ID) if f"tests/{path}" not in ALLOWED]
    assert not named, (
        f"{', '.join(named)}: the current stack's id {CURRENT_STACK_ID} written in a test; take it from "
        "tests.support.CURRENT_STACK_ID or the current_stack_id fixture (a test of one stack's contents "
        "names that stack and goes in ALLOWED with its reason)"
    )


def test_the_scan_finds_a_written_id(tmp_path: Path) -> None:
    """The scan itself: an id in a test file is found, a longer id that begins with it is not."""
    (tmp_path / "test_named.py").write_text(f'STACK = "{CURRENT_STACK_ID}"\n')
    (tmp_path / "test_tag.py").write_text(f'AMI = "trainstack-{CURRENT_STACK_ID}-0123456789ab"\n')
    (tmp_path / "test_other.py").write_text(f'STACK = "{CURRENT_STACK_ID}0"\nOTHER = "x{CURRENT_STACK_ID}"\n')
    found = files_naming(CURRENT_STACK_ID, tmp_path)
    assert found == ["test_named.py", "test_tag.py"]
