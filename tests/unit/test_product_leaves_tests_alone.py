"""Product code never imports or runs anything under tests/.

What ships (plugins, roles, playbooks, the test cases, packer, stacks, inventories) and what measures it
(bench/) must work from a collection or a clone without the test tree: a path into tests/ would break there,
and would make a test's helper part of the product without its review. Text that only names a test (a
docstring, a comment, Markdown) is fine; code that imports `tests`, or a command or string in code that
reaches into tests/, is not. The test tree may use the product and bench, not the other way round.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support import REPO

PRODUCT = ("plugins", "roles", "playbooks", "bench", "testcases", "packer", "stacks", "inventories", "meta")
# Measurement history and recorded outputs quote the commands that made them.
HISTORY = (REPO / "bench" / "reports", REPO / "bench" / "results")
TEXT_SUFFIXES = {".sh", ".yml", ".yaml", ".j2", ".hcl", ".cfg", ".toml", ".json", ".service", ".conf"}
PATH = re.compile(r"(^|[^A-Za-z0-9_.-])tests/[A-Za-z_]")


def _docstring_nodes(tree: ast.AST) -> set[int]:
    """ids of the string nodes that are docstrings (a module's, class's or function's first statement)."""
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(id(value))
    return found


def _is_tests(module: str) -> bool:
    """Whether a module name is the test tree's package or one below it."""
    return module.split(".")[0] == "tests"


def _is_code_string(node: ast.AST, docstrings: set[int]) -> bool:
    """A string constant that code uses (not a docstring)."""
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings


def python_reaches(source: str) -> list[str]:
    """Imports of the `tests` package, and strings in code (not docstrings) that hold a path into tests/."""
    tree = ast.parse(source)
    docstrings = _docstring_nodes(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if _is_tests(a.name)]
        elif isinstance(node, ast.ImportFrom) and not node.level and _is_tests(node.module or ""):
            found.append(f"from {node.module} import")
        elif _is_code_string(node, docstrings) and PATH.search(node.value):
            found.append(repr(node.value[:80]))
    return found


def text_reaches(source: str) -> list[str]:
    """Lines outside comments that hold a path into tests/."""
    return [
        line.strip()
        for line in source.splitlines()
        if PATH.search(line) and not line.lstrip().startswith("#")
    ]


def product_files() -> list[Path]:
    """Files of the product and of bench, history aside."""
    files = []
    for top in PRODUCT:
        for path in sorted((REPO / top).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts or ".egg-info" in str(path):
                continue
            if any(h in path.parents for h in HISTORY):
                continue
            if path.suffix == ".py" or path.suffix in TEXT_SUFFIXES:
                files.append(path)
    return files


def reaches(path: Path) -> list[str]:
    """What the file does with tests/ (empty: nothing)."""
    source = path.read_text(encoding="utf-8")
    return python_reaches(source) if path.suffix == ".py" else text_reaches(source)


def test_the_checks_see_an_import_a_command_and_a_path() -> None:
    assert python_reaches("from tests.support import REPO\n") == ["from tests.support import"]
    assert python_reaches("import tests.support\n") == ["import tests.support"]
    assert python_reaches('"""Docs name tests/unit."""\nx = 1\n') == []
    assert python_reaches('run(["pytest", "tests/gpu"])\n') == ["'tests/gpu'"]
    assert text_reaches("# see tests/unit\n  ansible-playbook tests/gpu/x.yml\n") == [
        "ansible-playbook tests/gpu/x.yml"
    ]
    assert text_reaches("src: roles/x/tests/\n") == []


def test_no_product_file_reaches_into_tests() -> None:
    found = {path.relative_to(REPO).as_posix(): hits for path in product_files() if (hits := reaches(path))}
    assert not found, f"product code reaching into tests/: {found}"
