"""tests/slow_shards.yml cuts the slow suite into shards; every slow test and scenario must be in exactly one.

A slow test in no shard would never run (CI runs one shard per change, `make test-slow` the shards it lists),
and one in two would run twice; a typo in the file would drop a shard's tests without a word. Each fails here:
the slow tests are collected as `make test-slow` collects them (two processes: the test cases' torch.compile
cannot share one with Ansible) and placed against the file.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.support import REPO, ansible_env


def _script() -> ModuleType:
    path = REPO / "scripts" / "slow_shards.py"
    spec = importlib.util.spec_from_file_location("slow_shards", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


SCRIPT = _script()
SHARDS = SCRIPT.load()


def _collect_slow(*selection: str) -> list[str]:
    """Node ids of the tests marked slow under `selection`, collected as pytest would run them."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-m",
            "slow",
            "-p",
            "no:cacheprovider",
            *selection,
        ],
        cwd=REPO,
        env=ansible_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, f"collection failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
    return [line for line in proc.stdout.splitlines() if "::" in line and not line.startswith(" ")]


@pytest.fixture(scope="module")
def slow_tests() -> list[str]:
    ansible_side = _collect_slow("tests/unit", "tests/integration", f"--ignore={SCRIPT.TESTCASES_DIR}")
    testcases = _collect_slow(SCRIPT.TESTCASES_DIR)
    return ansible_side + testcases


def test_every_slow_test_is_in_exactly_one_shard(slow_tests: list[str]) -> None:
    assert len(slow_tests) > 50, "the slow suite was collected"
    placed = SCRIPT.placement(slow_tests, SHARDS)
    assert sorted(n for n, shards in placed.items() if not shards) == [], "slow tests in no shard"
    assert sorted(n for n, shards in placed.items() if len(shards) > 1) == [], "slow tests in two shards"


def test_every_selection_takes_in_a_slow_test(slow_tests: list[str]) -> None:
    """A selection that takes in no slow test is stale (a file renamed, or its tests no longer slow)."""
    stale = [
        (shard.index, selection)
        for shard in SHARDS
        for selection in shard.selections()
        if not any(SCRIPT._matches(node, selection) for node in slow_tests)
    ]
    assert stale == []


def test_placement_names_a_test_in_no_shard_and_one_in_two() -> None:
    shards = [
        SCRIPT.Shard(0, (), ("tests/integration/a.py",), ()),
        SCRIPT.Shard(1, (), ("tests/integration/a.py::test_x", "tests/integration/b"), ()),
    ]
    placed = SCRIPT.placement(
        [
            "tests/integration/a.py::test_x",
            "tests/integration/a.py::test_y",
            "tests/integration/b/t.py::test",
            "tests/c.py::t",
        ],
        shards,
    )
    assert placed == {
        "tests/integration/a.py::test_x": [0, 1],
        "tests/integration/a.py::test_y": [0],
        "tests/integration/b/t.py::test": [1],
        "tests/c.py::t": [],
    }
    # A prefix of a file name is not that file.
    assert SCRIPT.placement(["tests/integration/a.py2::t"], shards) == {"tests/integration/a.py2::t": []}


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "slow_shards.yml"
    path.write_text(text)
    return path


def _current() -> dict:
    return yaml.safe_load(SCRIPT.SHARDS.read_text())


def test_a_slow_scenario_in_no_shard_is_refused_by_name(tmp_path: Path) -> None:
    data = _current()
    dropped = data["slow_shards"][0]["molecule"].pop(0)
    with pytest.raises(SCRIPT.ShardError, match=rf"in none: \['{dropped}'\]"):
        SCRIPT.load(_write(tmp_path, yaml.safe_dump(data)))


def test_a_scenario_in_two_shards_is_refused(tmp_path: Path) -> None:
    data = _current()
    data["slow_shards"][1]["molecule"].append(data["slow_shards"][0]["molecule"][0])
    with pytest.raises(SCRIPT.ShardError, match="in two shards"):
        SCRIPT.load(_write(tmp_path, yaml.safe_dump(data)))


@pytest.mark.parametrize(
    ("shard", "message"),
    [
        ({"moleculee": []}, "unknown key"),
        ({"molecule": ["base"]}, "not a scenario of the suite slow"),
        ({"integration": ["tests/unit/testcases/test_jax_llama.py"]}, "belongs under testcases"),
        ({"testcases": ["tests/integration/launch/test_launch_jax.py"]}, "is not under tests/unit/testcases"),
        ({"integration": ["tests/integration/no_such_test.py"]}, "does not exist"),
        ({"seconds": -3}, "positive whole number"),
    ],
)
def test_a_bad_shard_is_refused_naming_the_key(tmp_path: Path, shard: dict, message: str) -> None:
    data = _current()
    data["slow_shards"].append(shard)
    with pytest.raises(SCRIPT.ShardError, match=message):
        SCRIPT.load(_write(tmp_path, yaml.safe_dump(data)))


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    text = SCRIPT.SHARDS.read_text().replace(
        "  - molecule:", "  - testcases: []\n    testcases: []\n    molecule:", 1
    )
    with pytest.raises(SCRIPT.ShardError, match="'testcases' given twice"):
        SCRIPT.load(_write(tmp_path, text))


def test_the_rotation_visits_every_shard_once_in_as_many_commits() -> None:
    count = len(SHARDS)
    assert sorted(SCRIPT.rotation(SHARDS, commits) for commits in range(700, 700 + count)) == list(
        range(count)
    )
    proc = subprocess.run(
        [sys.executable, "scripts/slow_shards.py", "rotation", "--explain", "--commits", str(count + 1)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.startswith(f"slow shard 1 of 0-{count - 1}: HEAD has {count + 1} commits")


def test_ci_runs_the_rotations_shard_after_make_test() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert ci.index("make test 2>&1") < ci.index('make test-slow SHARD="${shard}"')
    assert "scripts/slow_shards.py rotation" in ci


def _make_dry_run(*args: str) -> str:
    proc = subprocess.run(
        ["make", "-n", *args], cwd=REPO, env=ansible_env(), capture_output=True, text=True, check=True
    )
    return proc.stdout


@pytest.mark.parametrize("shard", SHARDS, ids=lambda s: f"shard{s.index}")
def test_make_runs_each_shards_parts(shard: object) -> None:
    molecule = _make_dry_run("slow-molecule", f"SHARD={shard.index}")
    assert f'scenarios="{" ".join(shard.molecule)}"' in molecule
    integration = _make_dry_run("slow-integration", f"SHARD={shard.index}")
    assert f'selection="{" ".join(shard.integration)}"' in integration
    testcases = _make_dry_run("slow-testcases", f"SHARD={shard.index}")
    assert f'selection="{" ".join(shard.testcases)}"' in testcases


def test_make_refuses_a_shard_that_does_not_exist() -> None:
    proc = subprocess.run(
        ["make", "test-slow", f"SHARD={len(SHARDS)}"],
        cwd=REPO,
        env=ansible_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0
    assert f"SHARD must be a whole number from 0 to {len(SHARDS) - 1}" in proc.stderr + proc.stdout


def test_the_docs_table_is_generated_from_the_file() -> None:
    assert SCRIPT.main(["check-docs"]) == 0, "docs/testing.md is stale: run scripts/slow_shards.py docs"
