"""molecule/scenarios.yml is the one list of molecule scenarios, and everything that names scenarios reads it.

A scenario directory the list lacks would never run in `make test`; an entry without a directory would fail
it; two scenarios in one address block would take each other's nodes when run side by side; a hand-edited
README table drifts. Each of those fails here instead.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
from types import ModuleType

import pytest
import yaml

from tests.support import REPO, ansible_env

MOLECULE = REPO / "molecule"
# Addresses on the lab bridge that are not the scenarios' nodes: the lab's nodes and the integration tests'
# (tests/integration/image/boot_lab_node.yml boots at .157-.159, in the image block beyond its one node).
LAB_NODES = range(11, 51)
BLOCK = 5
OTHER_NODES = {157, 158, 159, 190, 192}


def _script() -> ModuleType:
    path = REPO / "scripts" / "molecule_scenarios.py"
    spec = importlib.util.spec_from_file_location("molecule_scenarios", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = _script()
SCENARIOS = SCRIPT.load()


def _platforms(name: str) -> list[str]:
    return [p["name"] for p in yaml.safe_load((MOLECULE / name / "molecule.yml").read_text())["platforms"]]


def test_every_scenario_directory_is_listed_and_every_entry_has_one() -> None:
    directories = {p.parent.name for p in MOLECULE.glob("*/molecule.yml")}
    assert sorted(directories - set(SCENARIOS)) == [], "scenario directories that scenarios.yml lacks"
    assert sorted(set(SCENARIOS) - directories) == [], "entries of scenarios.yml without a directory"


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_entry_has_every_field(name: str) -> None:
    entry = SCENARIOS[name]
    assert {"octet", "suite", "component", "nodes", "roles", "checks"} <= set(entry)
    assert entry["nodes"] == len(_platforms(name)), "nodes must be the scenario's platform count"


def test_platform_names_are_lab_names_no_two_scenarios_share() -> None:
    names = [p for name in SCENARIOS for p in _platforms(name)]
    assert [p for p in names if not p.startswith("ts-m-")] == []
    assert sorted(p for p in set(names) if names.count(p) > 1) == []


def test_address_blocks_are_apart_and_hold_their_nodes() -> None:
    taken: dict[int, str] = {}
    for name, entry in SCENARIOS.items():
        block = range(entry["octet"], entry["octet"] + BLOCK)
        nodes = range(entry["octet"], entry["octet"] + entry["nodes"])
        assert entry["nodes"] <= BLOCK, f"{name}: more nodes than its block of {BLOCK} addresses"
        assert block.start >= 100 and block.stop <= 255, f"{name}: block {block} is off the scenarios' range"
        assert not set(nodes) & (set(LAB_NODES) | OTHER_NODES), f"{name}: its nodes' addresses are taken"
        for octet in block:
            assert taken.setdefault(octet, name) == name, f"{name} and {taken[octet]} share .{octet}"


def test_the_shared_create_playbook_reads_the_list() -> None:
    play = yaml.safe_load((MOLECULE / "shared" / "create.yml").read_text())[0]
    files = [(MOLECULE / "shared" / f).resolve() for f in play["vars_files"]]
    assert MOLECULE / "scenarios.yml" in files
    assert "molecule_scenarios[" in (MOLECULE / "shared" / "create.yml").read_text()


def test_readme_table_is_the_generated_one() -> None:
    assert SCRIPT.main(["--check-readme"]) == 0, "run scripts/molecule_scenarios.py --readme"


def test_a_changed_entry_makes_the_readme_stale() -> None:
    changed = {**SCENARIOS, "base": {**SCENARIOS["base"], "nodes": 9}}
    text = (MOLECULE / "README.md").read_text()
    assert SCRIPT.readme_with_table(text, changed) != text
    assert SCRIPT.readme_with_table(text, SCENARIOS) == text


def test_an_unknown_suite_is_refused(tmp_path) -> None:
    bad = tmp_path / "scenarios.yml"
    bad.write_text(yaml.safe_dump({"molecule_scenarios": {"x": {"suite": "nightly", "component": "c"}}}))
    with pytest.raises(SystemExit, match="x: suite must be one of test, slow"):
        SCRIPT.load(bad)


def _make_dry_run(*targets: str) -> str:
    """What make would run for these targets (`make -n`: nothing runs but the list's $(shell ...))."""
    proc = subprocess.run(
        ["make", "-n", *targets], cwd=REPO, env=ansible_env(), capture_output=True, text=True, check=True
    )
    return proc.stdout


def test_make_molecule_runs_the_suite_test_in_the_lists_order() -> None:
    expected = " ".join(SCRIPT.names(SCENARIOS, "test"))
    assert expected.split() == [n for n, e in SCENARIOS.items() if e["suite"] == "test"]
    assert f"scripts/run-molecule.sh {expected}\n" in _make_dry_run("molecule")


def test_every_role_has_a_scenario_that_names_it() -> None:
    """`molecule test -s <role>` is how users prove a role: a role no scenario converges is proven by none."""
    roles = {p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir()}
    text = " ".join(str(entry["roles"]) for entry in SCENARIOS.values())
    named = {role for role in roles if re.search(rf"\b{role}\b", text)}
    assert sorted(roles - named - set(SCENARIOS)) == []
