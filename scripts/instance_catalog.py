#!/usr/bin/env python3
"""Render stacks/instance_types.yml into plugins/module_utils/catalog/instance_catalog_data.py.

Ansible copies module_utils to a target as Python files only; the YAML catalog would stay behind. The
generated module carries the same data, and `--check` (run by the unit tests) fails when it is stale.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "stacks" / "instance_types.yml"
TARGET = ROOT / "plugins" / "module_utils" / "catalog" / "instance_catalog_data.py"


def _loader() -> ModuleType:
    """The collection's loader, through the collection link `make setup` makes (.cache/collections): reading
    the YAML goes through the collection's strict loader, which refuses a key given twice."""
    sys.path.insert(0, str(ROOT / ".cache" / "collections"))
    return importlib.import_module(
        "ansible_collections.trainstack.cluster.plugins.module_utils.catalog.instance_catalog"
    )


def _render() -> str:
    """Validate the YAML and return the module text (a bad entry stops here, named)."""
    loader = _loader()
    return str(loader.render_module(loader.load_file(str(SOURCE))))


def main(argv: list[str] | None = None) -> int:
    """Write the module, or with --check say whether it matches the YAML."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the generated module is stale")
    parser.add_argument(
        "--node-health",
        metavar="PATH",
        help="instead, write node_health.py's table (every type) to PATH, for running the script by hand",
    )
    args = parser.parse_args(argv)
    if args.node_health:
        loader = _loader()
        table = loader.load_file(str(SOURCE)).health_table()
        text = json.dumps(table, indent=1, sort_keys=True) + "\n"
        Path(args.node_health).write_text(text, encoding="utf-8")
        return 0
    text = _render()
    current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
    if args.check:
        if current != text:
            print(f"{TARGET.relative_to(ROOT)} is stale: run `make instance-catalog`", file=sys.stderr)
            return 1
        return 0
    if current != text:
        TARGET.write_text(text, encoding="utf-8")
        print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
