"""There is one table of instance types: stacks/instance_types.yml (and the module generated from it).

A second table is how the five old ones came to disagree, so any mapping keyed by an instance type
(`p5.48xlarge:`) or by a catalog family (`p5:`) outside the catalog fails here, as does the made-up
instance type the project once used for its one-GPU machine. Documentation and tests may name types freely.
"""

from __future__ import annotations

import re
from pathlib import Path

from ansible_collections.trainstack.cluster.plugins.module_utils.instance_catalog import default

REPO = Path(__file__).resolve().parents[3]
SCANNED = ("roles", "plugins", "playbooks", "stacks", "inventories", "molecule", "scripts", "bench")
SUFFIXES = {".yml", ".yaml", ".py", ".json", ".j2", ".cfg", ".ini", ".toml", ".sh"}
ALLOWED = {
    Path("stacks/instance_types.yml"),
    Path("plugins/module_utils/instance_catalog_data.py"),
}
# Recorded measurements keep the names they were taken under.
RECORDS = Path("bench/results")
TYPE_KEY = re.compile(r"""^\s*["']?(?:ml\.)?([a-z][a-z0-9-]*\.(?:\d*x?large|metal[\w-]*))["']?\s*:""")


def _family_key(families: list[str]) -> re.Pattern[str]:
    names = "|".join(re.escape(f) for f in sorted(families, key=len, reverse=True))
    return re.compile(rf"""^\s*["']?(?:{names})["']?\s*:""")


def _product_files() -> list[Path]:
    files = []
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*")):
            rel = path.relative_to(REPO)
            if not path.is_file() or path.suffix not in SUFFIXES or rel in ALLOWED:
                continue
            if RECORDS in rel.parents or "tests" in rel.parts or "__pycache__" in rel.parts:
                continue
            files.append(path)
    return files


def find_tables(files: list[Path], families: list[str], root: Path = REPO) -> list[str]:
    """Every line that keys a mapping by an instance type or an instance family, as `path:line: text`."""
    family_key = _family_key(families)
    hits = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if TYPE_KEY.match(line) or family_key.match(line):
                hits.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    return hits


def test_no_other_instance_type_table_in_the_product() -> None:
    hits = find_tables(_product_files(), default().families())
    assert hits == [], "instance facts belong in stacks/instance_types.yml:\n" + "\n".join(hits)


def test_the_scan_finds_a_table_of_either_shape(tmp_path: Path) -> None:
    # The detector itself: the shapes the old tables had (YAML by type, Python dict by type, YAML by family).
    sample = tmp_path / "vars.yml"
    text = "__x_types:\n  p5.48xlarge:\n    gpus: 8\n__x_gen:\n  g6e: ada\n"
    sample.write_text(text + "facts = {\n    'ml.trn2.48xlarge': 1,\n}\n", encoding="utf-8")
    hits = find_tables([sample], default().families(), tmp_path)
    assert [hit.split(": ", 1)[1] for hit in hits] == ["p5.48xlarge:", "g6e: ada", "'ml.trn2.48xlarge': 1,"]


def test_no_made_up_instance_type() -> None:
    # A single machine is `local` with its GPUs detected or given, not an invented type name.
    files = [*_product_files(), *sorted((REPO / "docs").rglob("*.md"))]
    hits = [str(p.relative_to(REPO)) for p in files if "h200x1" in p.read_text(encoding="utf-8")]
    assert hits == []
