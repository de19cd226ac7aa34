"""Sizes and shared layers of the container images a build recorded (build/container/<flavour>.json).

Each flavour is one layer on its parent's image, so an image's own layer costs its size less its parent's, and
images with a common ancestor share that ancestor's layers: a registry, or a node's image store, holds them
once. For each recorded flavour: the image, its unpacked size as buildah reports it, its layer count, its own
layer's size, the flavours whose layers it shares (its ancestors) and the bytes they hold. Writes JSON to
bench/results/container_layers.json (or --out).

    python -m bench.container_layers [--records build/container] [--out bench/results/container_layers.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import Any

from bench.support.lab import REPO

UNITS = {"B": 1, "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


def buildah(*args: str) -> str:
    return subprocess.run(["buildah", *args], capture_output=True, text=True, check=True).stdout


def image_bytes(image: str) -> int:
    """Unpacked size of an image (all its layers) as buildah reports it, rounded: "1.59 GB"."""
    number, unit = json.loads(buildah("images", "--json", image))[0]["size"].split()
    return round(float(number) * UNITS[unit])


def diff_ids(image: str) -> list[str]:
    return json.loads(buildah("inspect", "--type", "image", image))["OCIv1"]["rootfs"]["diff_ids"]


def report(records: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per flavour: size, layers, own layer and what it shares with the other recorded images."""
    by_image = {r["image"]: f for f, r in records.items()}
    sizes = {f: image_bytes(r["image"]) for f, r in records.items()}
    layers = {f: diff_ids(r["image"]) for f, r in records.items()}
    out: dict[str, Any] = {}
    for flavour, record in records.items():
        parent = by_image.get(record.get("parent", ""))
        ancestors = []
        while parent:
            ancestors.append(parent)
            parent = by_image.get(records[parent].get("parent", ""))
        out[flavour] = {
            "image": record["image"],
            "bytes": sizes[flavour],
            "layers": len(layers[flavour]),
            "own_layer_bytes": sizes[flavour] - (sizes[ancestors[0]] if ancestors else 0),
            "shares_layers_of": ancestors,
            "shared_bytes": sizes[ancestors[0]] if ancestors else 0,
            "shares_every_parent_layer": all(
                layers[flavour][: len(layers[a])] == layers[a] for a in ancestors
            ),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, default=REPO / "build" / "container")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "container_layers.json")
    args = parser.parse_args(argv)
    records = {p.stem: json.loads(p.read_text()) for p in sorted(args.records.glob("*.json"))}
    if not records:
        raise SystemExit(f"no build records in {args.records} (run playbooks/build_container.yml first)")
    result = report(records)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    for flavour, row in result.items():
        print(
            f"{flavour:24} {row['bytes'] / 1e9:6.2f} GB  {row['layers']} layers  "
            f"own {row['own_layer_bytes'] / 1e9:6.2f} GB"
            f"  shares {', '.join(row['shares_layers_of']) or '-'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
