#!/usr/bin/env python3
"""Local image build time and size: cold, warm, and warm after a change to the flavour's last role
(`make bench-image`).

Runs, in one invocation and one fresh cache directory (the machine's real cache is neither used nor
destroyed):

1. cold: empty cache (debootstrap, every download; every stage runs and is snapshotted);
2. warm, stage reuse off (IMAGE_STAGE_CACHE=0): cached root filesystem, apt, pip and artifacts, every stage
   run again on the base; what any change cost before stage reuse, and the baseline of run 4;
3. warm, nothing changed: every stage reused from its snapshot;
4. warm, the last role changed: resumes from the snapshot of the stage before the flavour's last role and
   runs that role alone. The change is made without editing the tree: IMAGE_STAGE_REBUILD=<last role> makes
   the build run that stage and every later one again (the last role has none after it), which is the work a
   change to its files causes; only the key its new snapshot is filed under differs.

Writes JSON to stdout and bench/results/, and a PNG beside it (bench/support/plotting.py): each run's time,
split into snapshot writing and the rest of the build.
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

from bench.support.plotting import stacked_bars

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Run:
    """One `make image-local` run."""

    label: str
    seconds: float
    packer_artifact_bytes: int
    lab_rootfs_bytes: int
    cache_bytes: int
    # The stage snapshots: how many stages the run reused and ran, the time spent writing snapshots (part of
    # ``seconds``) and the bytes the stages directory holds after it.
    stages_reused: int = 0
    stages_run: int = 0
    snapshot_seconds: float = 0.0
    snapshot_bytes: int = 0


def snapshot_records(cache: Path) -> dict[str, dict]:
    """The stage snapshots' records in a cache directory, by file name."""
    folder = cache / "stages"
    if not folder.is_dir():
        return {}
    return {p.name: json.loads(p.read_text()) for p in folder.glob("*.json")}


def dir_bytes(path: Path) -> int:
    """Bytes under a directory (the cache a warm build reuses)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def build(label: str, stack: str, flavour: str, out: Path, cache: Path, *extra: str) -> Run:
    """Time one end-to-end local build and measure what it produced."""
    cmd = [
        "make",
        "-s",
        "image-local",
        f"STACK={stack}",
        f"IMAGE_FLAVOUR={flavour}",
        f"IMAGE_OUT={out}",
        f"IMAGE_CACHE_DIR={cache}",
        *extra,
    ]
    before = snapshot_records(cache)
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-5000:] + proc.stderr[-2000:])
        raise SystemExit(f"bench-image: {label} build failed ({proc.returncode})")
    local = out / f"local-{flavour}"
    builds = json.loads((local / "packer-manifest.json").read_text())["builds"]
    written = [r for name, r in snapshot_records(cache).items() if before.get(name) != r]
    plan_path = local / "stages.json"
    plan = json.loads(plan_path.read_text()) if plan_path.is_file() else None
    after = plan["resume"]["after"] if plan else 0
    return Run(
        label=label,
        seconds=round(seconds, 1),
        packer_artifact_bytes=(local / "packer" / "rootfs.tar.gz").stat().st_size,
        lab_rootfs_bytes=Path(builds[-1]["custom_data"]["lab_rootfs"]).stat().st_size,
        cache_bytes=dir_bytes(cache),
        stages_reused=after,
        stages_run=len(plan["stages"]) - after if plan else 0,
        snapshot_seconds=round(sum(float(r.get("seconds", 0)) for r in written), 1),
        snapshot_bytes=dir_bytes(cache / "stages") if (cache / "stages").is_dir() else 0,
    )


def last_role(out: Path, flavour: str) -> str:
    """The flavour's last stage on this build's OS (the plan the cold build wrote)."""
    plan = json.loads((out / f"local-{flavour}" / "stages.json").read_text())
    return str(plan["stages"][-1]["role"])


def plot(runs: list[Run], target: Path, title: str) -> str:
    """Each run's time, snapshot writing apart from the rest; the PNG's name or why none was drawn."""
    bars = {
        run.label: {
            "snapshots written": run.snapshot_seconds,
            "rest of the build": run.seconds - run.snapshot_seconds,
        }
        for run in runs
    }
    return stacked_bars(bars, target, title=title)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stack", default=(REPO / "stacks" / "current").read_text().strip())
    parser.add_argument("--flavour", default="slurm-gpu")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench-image: LXC builds need root")
    work = Path(tempfile.mkdtemp(prefix="bench-image-", dir="/var/tmp"))
    out, cache = work / "out", work / "cache"
    try:
        cold = build("cold (empty cache: baseline)", args.stack, args.flavour, out, cache)
        role = last_role(out, args.flavour)
        no_reuse = build(
            "warm, stage reuse off (rootfs, apt, pip cached)",
            args.stack,
            args.flavour,
            out,
            cache,
            "IMAGE_STAGE_CACHE=0",
        )
        unchanged = build("warm, nothing changed (every stage reused)", args.stack, args.flavour, out, cache)
        late = build(
            f"warm, last role ({role}) changed",
            args.stack,
            args.flavour,
            out,
            cache,
            f"IMAGE_STAGE_REBUILD={role}",
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    stem = f"image_build-{when.replace(':', '')}"
    args.results.mkdir(parents=True, exist_ok=True)
    runs = [cold, no_reuse, unchanged, late]
    result = {
        "benchmark": "image_build",
        "when": when,
        "stack": args.stack,
        "flavour": args.flavour,
        "cpus": os.cpu_count(),
        "last_role": role,
        "baseline": asdict(cold),
        "measured": asdict(unchanged),
        "speedup": round(cold.seconds / unchanged.seconds, 2),
        # A change to the last role: with stage reuse against the best warm build without it.
        "late_change": {
            "baseline": asdict(no_reuse),
            "measured": asdict(late),
            "speedup": round(no_reuse.seconds / late.seconds, 2),
            "target_seconds": 90,
        },
        "png": plot(runs, args.results / f"{stem}.png", f"make image-local {args.flavour}, {args.stack}"),
    }
    text = json.dumps(result, indent=2)
    print(text)
    (args.results / f"{stem}.json").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
