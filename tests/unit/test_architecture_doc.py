"""docs/architecture.md has a table row for every plugin of the collection, and none for one that is gone.

The architecture is what a maintainer reads first. A module, plugin file, filter or module_utils file missing
from its tables is one they will not find; a row for a removed one sends them looking for nothing. What should
be there is read from plugins/ on every run, never listed here: the module files, every other plugin
directory's files, each filter's documentation file and the names its FilterModule returns, and the files and
subpackages of module_utils.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import REPO

DOC = REPO / "docs" / "architecture.md"
PLUGINS = REPO / "plugins"
SECTION = "## Plugins, file by file"
# Directories of plugins/ with a table of their own (the rest share "Other plugins").
OWN_TABLES = ("modules", "module_utils")
ROW_NAME = re.compile(r"`([^`]+)`")


def _python_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.py") if p.name != "__init__.py")


def modules() -> set[str]:
    """Module names: the files of plugins/modules/."""
    return {p.stem for p in _python_files(PLUGINS / "modules")}


def other_plugins() -> set[str]:
    """`<kind>/<file>.py` for every plugin directory other than modules and module_utils."""
    return {
        f"{directory.name}/{p.name}"
        for directory in sorted(PLUGINS.iterdir())
        if directory.is_dir() and directory.name not in OWN_TABLES and not directory.name.startswith("__")
        for p in _python_files(directory)
    }


def filter_names_of(path: Path) -> set[str]:
    """The keys of the dict literal that FilterModule.filters() returns in one filter file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "filters":
            for inner in ast.walk(node):
                if isinstance(inner, ast.Return) and isinstance(inner.value, ast.Dict):
                    return {key.value for key in inner.value.keys if isinstance(key, ast.Constant)}
    pytest.fail(f"{path.relative_to(REPO)}: no FilterModule.filters() returning a dict literal to read")


def filters() -> set[str]:
    """Filter names: each <name>.yml documentation file, and each name a FilterModule returns."""
    directory = PLUGINS / "filter"
    documented = {p.stem for p in directory.glob("*.yml")}
    returned = {name for p in _python_files(directory) for name in filter_names_of(p)}
    return documented | returned


def module_utils() -> set[str]:
    """`<file>.py` at the top of module_utils, `<package>/` for each subpackage and `<package>/<file>.py`."""
    directory = PLUGINS / "module_utils"
    found = {p.name for p in _python_files(directory)}
    for package in sorted(directory.iterdir()):
        if package.is_dir() and any(package.glob("*.py")):
            found.add(f"{package.name}/")
            found |= {f"{package.name}/{p.name}" for p in _python_files(package)}
    return found


# Each table: the start of its ### heading in SECTION, and what the tree holds for it.
TABLES: dict[str, Callable[[], set[str]]] = {
    "### Modules": modules,
    "### Other plugins": other_plugins,
    "### Filters": filters,
    "### module_utils": module_utils,
}


def table_rows(text: str) -> dict[str, list[str]]:
    """First cells of the table rows under each ### heading of SECTION.

    A table's header is the row that follows a line outside the table, so a row is kept only when a table row
    comes before it; the separator row is known by its characters (|, -, : and spaces).
    """
    rows: dict[str, list[str]] = {}
    inside, heading, previous = False, "", ""
    for line in text.splitlines():
        if line.startswith("## "):
            inside, heading = line.strip() == SECTION, ""
        elif inside and line.startswith("### "):
            heading = line.strip()
            rows.setdefault(heading, [])
        elif inside and heading and line.startswith("|"):
            cells = line.split("|")
            separator = set(line) <= set("|-: ")
            if previous.startswith("|") and not separator:
                rows[heading].append(cells[1].strip())
        previous = line
    return rows


def first_cells(rows: dict[str, list[str]], start: str) -> list[str]:
    """The first cells of the table under the heading that begins with `start`, as written."""
    return [cell for heading, found in rows.items() if heading.startswith(start) for cell in found]


def named_in(rows: dict[str, list[str]], start: str) -> list[str]:
    """The names in those cells, backticks removed (a cell that is not one name in backticks stays as is)."""
    return [
        match.group(1) if (match := ROW_NAME.fullmatch(cell)) else cell for cell in first_cells(rows, start)
    ]


def test_table_rows_are_read_from_the_section_only() -> None:
    text = "\n".join(
        [
            "## Elsewhere",
            "### Modules",
            "| module | purpose |",
            "| --- | --- |",
            "| `outside` | not in the section |",
            SECTION,
            "### Modules (`plugins/modules/`)",
            "",
            "| module | purpose |",
            "| --- | --- |",
            "| `artifact` | downloads |",
            "| `slurm_job` | jobs |",
            "### Filters",
            "| filter | file |",
            "|---|---|",
            "| `stack_os_id` | `stack.py` |",
            "## Next",
            "| `after` | the section |",
        ]
    )
    rows = table_rows(text)
    assert named_in(rows, "### Modules") == ["artifact", "slurm_job"]
    assert named_in(rows, "### Filters") == ["stack_os_id"]
    unquoted = table_rows(f"{SECTION}\n### Modules\n| module |\n| --- |\n| artifact |")
    assert [ROW_NAME.fullmatch(cell) for cell in first_cells(unquoted, "### Modules")] == [None]


def test_the_tree_is_read() -> None:
    """Each reader finds what is certainly there, so an empty reader cannot pass the checks below."""
    assert {"cluster_spec", "slurm_job"} <= modules()
    assert {"action/slurm_job.py", "lookup/stack.py", "inventory/ec2_cluster.py"} <= other_plugins()
    assert {"cluster_head", "stack_os_id", "close_matches"} <= filters()
    assert {"cluster/cluster_spec.py", "launch/", "launch/plan.py"} <= module_utils()


@pytest.mark.parametrize("start", list(TABLES))
def test_each_table_names_exactly_what_the_tree_holds(start: str) -> None:
    rows = table_rows(DOC.read_text(encoding="utf-8"))
    assert any(heading.startswith(start) for heading in rows), (
        f"{DOC.name}: no heading {start!r} in {SECTION!r}"
    )
    malformed = [cell for cell in first_cells(rows, start) if not ROW_NAME.fullmatch(cell)]
    assert not malformed, f"{start}: a row's first cell must be one name in backticks: {malformed}"
    named = named_in(rows, start)
    twice = sorted({name for name in named if named.count(name) > 1})
    assert not twice, f"{start}: named in more than one row: {twice}"
    expected = TABLES[start]()
    missing, gone = sorted(expected - set(named)), sorted(set(named) - expected)
    assert not missing and not gone, (
        f"docs/architecture.md, {start}: "
        + (f"no row for {missing} (add one); " if missing else "")
        + (f"a row for {gone}, which plugins/ does not hold (remove it)" if gone else "")
    )
