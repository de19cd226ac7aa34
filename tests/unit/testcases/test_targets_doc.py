"""docs/testcases.md's table of targets per test case says which locks each case has (the files beside
its manifest), and says the Ubuntu 22.04 images bake it exactly where it has a lock for them."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "testcases.md"
SECTION = "### Targets and baked environments per test case"


def table() -> dict[str, tuple[str, str]]:
    text = DOC.read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| ([^|]+) \| ([^|]+) \|$", text, re.M)
    return {case: (locked.strip(), baked.strip()) for case, locked, baked in rows}


def container_targets() -> set[str]:
    """The container images' targets (testcases/gpu_targets.yml): one architecture each, named in full."""
    spec = yaml.safe_load((ROOT / "testcases" / "gpu_targets.yml").read_text())
    return {f"gpu-{item['os']}-{item['arch']}" for item in spec.get("containers", [])}


def locked_for(case: str) -> set[str]:
    """The case's targets as the table writes them: `lab`, `gpu-<os>-*` (both architectures have one), and a
    container target in full."""
    names = [p.name for p in (ROOT / "testcases" / case).glob("requirements*.lock")]
    targets = {"lab" if n == "requirements.lock" else n[len("requirements.") : -len(".lock")] for n in names}
    containers = targets & container_targets()
    folded = {re.sub(r"-(x86_64|aarch64)$", "-*", t) for t in targets - containers}
    for target in folded - {"lab"}:
        stem = target[:-1]
        assert {f"{stem}x86_64", f"{stem}aarch64"} <= targets, f"{case}: {target} has one architecture only"
    return folded | containers


def test_the_table_lists_every_case_with_its_locks() -> None:
    rows = table()
    cases = sorted(
        str(p.parent.relative_to(ROOT / "testcases")) for p in (ROOT / "testcases").glob("*/*/testcase.yml")
    )
    assert sorted(rows) == cases
    for case, (locked, baked) in rows.items():
        assert set(re.findall(r"`([^`]+)`", locked)) == locked_for(case), case
        assert ("every OS" in baked) == ("gpu-ubuntu-22.04-*" in locked_for(case)), case
