#!/usr/bin/env python3
"""Download the wheels that the catalog's test cases need into one directory (a wheelhouse).

Lab nodes (and air-gapped clusters) install test-case virtualenvs from it with --no-index. It also keeps the
CPU build of torch: from PyPI, `pip install torch` on Linux takes the CUDA build and several GB of NVIDIA
libraries, which CPU-only lab nodes never use. The local image's roles/pytorch installs from it with
--require-hashes against stacks/locks/<stack>.pytorch-cpu.txt, so the exact files those locks pin are fetched
too (pip checks their hashes as it downloads).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import yaml

CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
CPU_LOCKS = sorted((Path(__file__).resolve().parents[1] / "stacks" / "locks").glob("*.pytorch-cpu.txt"))


WHEELHOUSE_SETS = ("default", "slow")


def requirements(manifests: list[Path], wheelhouse_set: str = "default") -> list[str]:
    """Every pinned requirement of the manifests in ``wheelhouse_set``, once each.

    A manifest's ``wheelhouse`` key (``default`` when absent) says which set holds its wheels: ``slow`` keeps
    large dependency trees (torchtitan's) out of the wheelhouse that every ``make test`` downloads.
    """
    reqs: set[str] = set()
    for manifest in manifests:
        body = yaml.safe_load(manifest.read_text())
        if body.get("wheelhouse", "default") == wheelhouse_set:
            reqs.update(body.get("requirements") or [])
    return sorted(reqs)


def download(reqs: list[str], dest: Path) -> None:
    """pip download into dest; TRAINSTACK_TORCH_INDEX adds an index (such as PyTorch's CPU one)."""
    # A dropped connection on a cold cache costs a retry, not the run (pip's default is 5 quick ones).
    argv = [sys.executable, "-m", "pip", "download", "--retries", "10", "--only-binary=:all:", "--dest"]
    argv += [str(dest), *reqs]
    extra = os.environ.get("TRAINSTACK_TORCH_INDEX")
    if extra:
        argv[4:4] = ["--extra-index-url", extra]
    subprocess.run(argv, check=True)


def download_locked(locks: list[Path], dest: Path) -> None:
    """The files the CPU locks pin, by hash: a wheelhouse resolved after a lock still holds its versions."""
    for lock in locks:
        argv = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--only-binary=:all:",
            "--no-deps",
            "--require-hashes",
        ]
        subprocess.run([*argv, "--dest", str(dest), "-r", str(lock)], check=True)


def check_cpu_torch(dest: Path) -> None:
    """Refuse a CUDA torch build: it would drag gigabytes of CUDA wheels onto CPU-only nodes."""
    torch_wheels = sorted(dest.glob("torch-*.whl"))
    cuda = [w.name for w in torch_wheels if "+cpu" not in w.name]
    if cuda:
        sys.exit(
            f"wheelhouse: {cuda} is a CUDA build of torch. Put a CPU wheel where pip finds it, or set "
            f"TRAINSTACK_TORCH_INDEX={CPU_TORCH_INDEX} and run again."
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, required=True)
    parser.add_argument("--set", dest="wheelhouse_set", choices=WHEELHOUSE_SETS, default="default")
    parser.add_argument("manifests", type=Path, nargs="+")
    args = parser.parse_args()
    args.dest.mkdir(parents=True, exist_ok=True)
    reqs = requirements(args.manifests, args.wheelhouse_set)
    print(f"wheelhouse ({args.wheelhouse_set}): " + " ".join(reqs))
    download(reqs, args.dest)
    if args.wheelhouse_set == "default":
        # The image's locked CPU torch stack; the slow set only serves test-case virtualenvs.
        download_locked(CPU_LOCKS, args.dest)
    check_cpu_torch(args.dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
