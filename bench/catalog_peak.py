"""The dense BF16 peak per GPU of an instance type, in TFLOP/s, from the collection's instance catalog.

MFU is achieved FLOP/s per GPU over this peak. The catalog (stacks/instance_types.yml, ``bf16_dense_flops``)
is the one place the project keeps it, so a benchmark names the catalog instance type whose GPU it runs on and
reads the peak here: the committed result then says which figure it was divided by, and a rerun divides by the
same one. Standard library only, since a GPU machine's torch Python has neither Ansible nor the collection
installed: the catalog loader and its generated data module are loaded by path.

    python3 -m bench.catalog_peak p5en.48xlarge     # prints 989.4
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "plugins" / "module_utils" / "catalog"
# The committed GPU results were measured on NVIDIA H200s; p5en is a catalog type with that GPU.
DEFAULT_INSTANCE_TYPE = "p5en.48xlarge"


class PeakError(ValueError):
    """The instance type is unknown, or the catalog holds no BF16 peak for it; the message says which."""


def _load(name: str) -> ModuleType:
    """One module of module_utils/catalog by path (registered first: dataclasses look their module up)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, CATALOG / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def catalog() -> object:
    """The whole catalog, for a reader that needs every type (a check of a rule against each GPU)."""
    return _load("instance_catalog").Catalog(_load("instance_catalog_data").CATALOG)


def catalog_entry(instance_type: str) -> object:
    """The merged catalog entry; an unknown type is refused with the known ones listed."""
    loader = _load("instance_catalog")
    try:
        return catalog().get(instance_type)
    except loader.CatalogError as err:
        raise PeakError(str(err)) from err


def peak_tflops(instance_type: str) -> float:
    """``bf16_dense_flops / 1e12`` of the type; a type without one (a CPU or Trainium type) is refused."""
    flops = getattr(catalog_entry(instance_type), "bf16_dense_flops", None)
    if flops is None:
        raise PeakError(
            f"instance type {instance_type!r} has no bf16_dense_flops in stacks/instance_types.yml: "
            "name a type whose GPU the benchmark machine has"
        )
    return float(flops) / 1e12


def main(argv: list[str] | None = None) -> int:
    """Print the peak (for shell scripts); exit 2 with the reason on a type the catalog cannot answer."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("instance_type", nargs="?", default=DEFAULT_INSTANCE_TYPE)
    args = parser.parse_args(argv)
    try:
        print(peak_tflops(args.instance_type))
    except PeakError as err:
        parser.error(str(err))
    return 0


if __name__ == "__main__":
    sys.exit(main())
