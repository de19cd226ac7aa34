"""There is one table of instance types: stacks/instance_types.yml (and the module generated from it).

A second table is how the five old ones came to disagree, so any mapping keyed by an instance type
(`p5.48xlarge:`) or by a catalog family (`p5:`) outside the catalog fails here, as does the made-up
instance type the project once used for its one-GPU machine. Documentation and tests may name types freely.

The same holds for facts keyed by GPU model: a mapping from a GPU name to a number (`"H200": 989.0`, the MFU
peak tables the test cases once kept) fails too. Test cases and benchmarks take the peak from the catalog
(`--peak-tflops`, which the launcher fills from `bf16_dense_flops`).
"""

from __future__ import annotations

import re
from pathlib import Path

from ansible_collections.trainstack.cluster.plugins.module_utils.catalog.instance_catalog import default

REPO = Path(__file__).resolve().parents[3]
SCANNED = (
    "roles",
    "plugins",
    "playbooks",
    "stacks",
    "inventories",
    "molecule",
    "scripts",
    "bench",
    "testcases",
)
SUFFIXES = {".yml", ".yaml", ".py", ".json", ".j2", ".cfg", ".ini", ".toml", ".sh"}
ALLOWED = {
    Path("stacks/instance_types.yml"),
    Path("plugins/module_utils/catalog/instance_catalog_data.py"),
}
# Recorded measurements keep the names they were taken under.
RECORDS = Path("bench/results")
TYPE_KEY = re.compile(r"""^\s*["']?(?:ml\.)?([a-z][a-z0-9-]*\.(?:\d*x?large|metal[\w-]*))["']?\s*:""")


def _family_key(families: list[str]) -> re.Pattern[str]:
    names = "|".join(re.escape(f) for f in sorted(families, key=len, reverse=True))
    return re.compile(rf"""^\s*["']?(?:{names})["']?\s*:""")


def _gpu_key(models: list[str]) -> re.Pattern[str]:
    """A GPU name (a catalog model, perhaps a Grace `G` before it or a variant after it) keying a number: the
    quoted key of a dict literal or pair (`"H100 PCIe": 756`, `("A100", 312)`) or a bare YAML key."""
    names = "|".join(re.escape(m) for m in sorted(models, key=len, reverse=True))
    gpu = rf"(?<![A-Za-z0-9])G?(?:{names})(?![0-9])"
    number = r"[-+]?\.?[0-9]"
    quoted = rf"""["'][^"'\n]*{gpu}[^"'\n]*["']\s*[:,]\s*{number}"""
    bare = rf"""^\s*(?:-\s*)?{gpu}[^:\n]*:\s*{number}"""
    return re.compile(rf"{quoted}|{bare}")


def _catalog_gpu_models() -> list[str]:
    catalog = default()
    return sorted({m for m in (catalog.get(n).gpu_model for n in catalog.names()) if m})


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


def find_gpu_tables(files: list[Path], models: list[str], root: Path = REPO) -> list[str]:
    """Every line that maps a GPU model to a number, as `path:line: text`."""
    gpu_key = _gpu_key(models)
    hits = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if gpu_key.search(line):
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


def test_no_gpu_model_table_in_the_product() -> None:
    # Test cases and benchmarks included: they read the peak from --peak-tflops, filled from the catalog.
    hits = find_gpu_tables(_product_files(), _catalog_gpu_models())
    assert hits == [], (
        "GPU facts belong in stacks/instance_types.yml (gpu_model, bf16_dense_flops):\n" + "\n".join(hits)
    )


def test_the_gpu_scan_finds_the_shapes_of_a_peak_table(tmp_path: Path) -> None:
    # The shapes the test cases' peak tables had, and lines that only name a GPU (which stay allowed).
    sample = tmp_path / "metrics.py"
    tables = [
        '    "H100 PCIe": 756.0,',
        "    'GH200': 989.0,",
        'PEAK = {"H200": 989.0, "H100": 989.0, "A100": 312.0}',
        '    ("L40S", 362),',
        "  B200: 2250",
    ]
    mentions = [
        "    gpu_model: H200",
        '"flop_formula": "MFU vs 989 TFLOP/s (H200)",',
        'name = "NVIDIA H200"  # a device name, 141 GB',
        '    "l4_cache": 4,',
        "# an A100: 312 TFLOP/s dense",
    ]
    sample.write_text("\n".join(tables + mentions) + "\n", encoding="utf-8")
    hits = find_gpu_tables([sample], _catalog_gpu_models(), tmp_path)
    assert [hit.split(": ", 1)[1] for hit in hits] == [line.strip() for line in tables]


def test_no_made_up_instance_type() -> None:
    # A single machine is `local` with its GPUs detected or given, not an invented type name.
    files = [*_product_files(), *sorted((REPO / "docs").rglob("*.md"))]
    hits = [str(p.relative_to(REPO)) for p in files if "h200x1" in p.read_text(encoding="utf-8")]
    assert hits == []
