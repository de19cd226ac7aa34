"""module_utils imports go one way: down the layers declared here, never up and never across.

Every file of plugins/module_utils sits in a subpackage, and each subpackage is one layer's (its __init__ says
what it holds and what it may import). LAYERS lists them lowest first: a package may import its own modules
and the packages of the rows before its own, never a package of its own row or of a later one. The imports
are read from the source with ast, so an import inside a function counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

MODULE_UTILS = Path(__file__).resolve().parents[4] / "plugins" / "module_utils"
# The two spellings of the package: the collection's (plugins and AnsiballZ) and the checkout's (some tests).
PREFIXES = ("ansible_collections.trainstack.cluster.plugins.module_utils", "plugins.module_utils")

LAYERS: tuple[tuple[str, ...], ...] = (
    # How the product's own YAML files are read (duplicate keys refused). It imports nothing else here.
    ("files",),
    # Base: AWS clients and waits, the instance catalog, verified downloads; the catalog reads its YAML source
    # through the layer above.
    ("aws", "catalog", "artifact"),
    # The files of stacks/ read and checked; they read the catalog and the lock entries below them.
    ("stack",),
    # What the plugins are built from, each reading the stack and the base, none of them another.
    ("cluster", "inventory", "launch", "image", "slurm"),
)
RANK = {package: rank for rank, row in enumerate(LAYERS) for package in row}


def package_of(path: Path, root: Path) -> str:
    """The subpackage a file of module_utils belongs to ('' for a file at the top)."""
    parts = path.relative_to(root).parts
    return parts[0] if len(parts) > 1 else ""


def imported_packages(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, subpackage of module_utils) for every import of module_utils in one file, relative ones too."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = ("module_utils", *path.relative_to(root).parent.parts)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            dotted = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            base = here[: len(here) - node.level + 1]
            module = ".".join((*base, *(node.module.split(".") if node.module else ())))
            dotted = [f"{module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            dotted = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in dotted:
            for prefix in (*PREFIXES, "module_utils"):
                if name.startswith(prefix + "."):
                    found.append((node.lineno, name[len(prefix) + 1 :].split(".")[0]))
                    break
    return found


def layer_problems(root: Path) -> list[str]:
    """One line per file outside the declared packages and per import that goes up or across the layers."""
    problems = [
        f"{package}/: declared in LAYERS but missing" for package in RANK if not (root / package).is_dir()
    ]
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        package = package_of(path, root)
        if package not in RANK:
            problems.append(
                f"{name}: in no package of LAYERS (add the file to one, or the package to LAYERS)"
            )
            continue
        for line, target in imported_packages(path, root):
            if target == package:
                continue
            if target not in RANK:
                problems.append(f"{name}:{line}: imports {target}, which is in no package of LAYERS")
            elif RANK[target] >= RANK[package]:
                where = "beside" if RANK[target] == RANK[package] else "above"
                problems.append(f"{name}:{line}: {package} imports {target}, which sits {where} it")
    return problems


def test_every_package_says_what_it_holds() -> None:
    for package in RANK:
        init = MODULE_UTILS / package / "__init__.py"
        assert init.is_file(), f"{package}/ has no __init__.py"
        assert ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))), (
            f"{package}/__init__.py: no docstring"
        )


def test_module_utils_imports_go_down_the_layers() -> None:
    problems = layer_problems(MODULE_UTILS)
    assert not problems, "\n".join(problems)


def test_the_imports_are_read() -> None:
    """The reader finds imports that are certainly there, so an empty reader cannot pass the check above."""
    spec = imported_packages(MODULE_UTILS / "cluster" / "cluster_spec.py", MODULE_UTILS)
    assert {"catalog", "stack"} <= {target for line, target in spec}
    lazy = imported_packages(MODULE_UTILS / "catalog" / "instance_catalog.py", MODULE_UTILS)
    assert [target for line, target in lazy] == ["files", "catalog"]


def write(root: Path, name: str, text: str = "") -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        (
            "stack/x.py",
            "from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import cluster_spec\n",
            "stack/x.py:1: stack imports cluster, which sits above it",
        ),
        (
            "cluster/x.py",
            "def f():\n    from ansible_collections.trainstack.cluster.plugins.module_utils import inventory",
            "cluster/x.py:2: cluster imports inventory, which sits beside it",
        ),
        (
            "catalog/x.py",
            "from ..stack import stack_matrix\n",
            "catalog/x.py:1: catalog imports stack, which sits above it",
        ),
        (
            "slurm/x.py",
            "import plugins.module_utils.nowhere.y\n",
            "slurm/x.py:1: imports nowhere, which is in no package of LAYERS",
        ),
        ("flat.py", "", "flat.py: in no package of LAYERS (add the file to one, or the package to LAYERS)"),
    ],
)
def test_an_import_against_the_layers_is_refused(tmp_path: Path, name: str, text: str, problem: str) -> None:
    for package in RANK:
        write(tmp_path, f"{package}/__init__.py")
    write(
        tmp_path,
        "cluster/ok.py",
        "from ansible_collections.trainstack.cluster.plugins.module_utils.stack.stack_matrix import resolve\n"
        "from . import ok\nfrom ..catalog import instance_catalog\n",
    )
    assert layer_problems(tmp_path) == []
    write(tmp_path, name, text)
    assert layer_problems(tmp_path) == [problem]
