#!/usr/bin/env python3
"""Local image build time, cold vs warm, and image size: `make bench-image`.

Baseline: a cold build (empty cache directory: debootstrap, every .deb and wheel downloaded). Measured: a
warm rebuild against the cache the cold build filled (cached root filesystem tarball, host apt archive and
pip cache bind-mounted into the build container). Both run in one invocation, in a fresh cache directory, so
the machine's real cache is neither used nor destroyed. Writes JSON to stdout and bench/results/.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Run:
    """One `make image-local` run."""

    label: str
    seconds: float
    packer_artifact_bytes: int
    lab_rootfs_bytes: int
    cache_bytes: int


def dir_bytes(path: Path) -> int:
    """Bytes under a directory (the cache a warm build reuses)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def build(label: str, stack: str, flavour: str, out: Path, cache: Path) -> Run:
    """Time one end-to-end local build and measure what it produced."""
    cmd = [
        "make",
        "-s",
        "image-local",
        f"STACK={stack}",
        f"IMAGE_FLAVOUR={flavour}",
        f"IMAGE_OUT={out}",
        f"IMAGE_CACHE_DIR={cache}",
    ]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-5000:] + proc.stderr[-2000:])
        raise SystemExit(f"bench-image: {label} build failed ({proc.returncode})")
    local = out / f"local-{flavour}"
    builds = json.loads((local / "packer-manifest.json").read_text())["builds"]
    return Run(
        label=label,
        seconds=round(seconds, 1),
        packer_artifact_bytes=(local / "packer" / "rootfs.tar.gz").stat().st_size,
        lab_rootfs_bytes=Path(builds[-1]["custom_data"]["lab_rootfs"]).stat().st_size,
        cache_bytes=dir_bytes(cache),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stack", default=(REPO / "stacks" / "current").read_text().strip())
    parser.add_argument("--flavour", default="slurm-gpu")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench-image: LXC builds need root")
    work = Path(tempfile.mkdtemp(prefix="bench-image-", dir="/var/tmp"))
    try:
        cold = build("cold (empty cache: baseline)", args.stack, args.flavour, work / "out", work / "cache")
        warm = build("warm (rootfs, apt, pip cached)", args.stack, args.flavour, work / "out", work / "cache")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "benchmark": "image_build",
        "when": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "stack": args.stack,
        "flavour": args.flavour,
        "cpus": os.cpu_count(),
        "baseline": asdict(cold),
        "measured": asdict(warm),
        "speedup": round(cold.seconds / warm.seconds, 2),
    }
    text = json.dumps(result, indent=2)
    print(text)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / f"image_build-{result['when'].replace(':', '')}.json").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
