#!/usr/bin/env python3
"""Download the wheels that the catalog's test cases need into one directory (a wheelhouse).

Lab nodes (and air-gapped clusters) install test-case virtualenvs from it with --no-index --require-hashes.
The files come from each test case's lock (requirements.lock beside its manifest, made by
scripts/testcase_lock.py), by hash, so the wheelhouse holds the locked files and nothing resolved on the day.
It also keeps the CPU build of torch: from PyPI, `pip install torch` on Linux takes the CUDA build and
several GB of NVIDIA libraries, which CPU-only lab nodes never use. The local image's roles/pytorch installs
from it with --require-hashes against stacks/locks/<stack>.pytorch-cpu.txt, so the exact files those locks
pin are fetched too (pip checks their hashes as it downloads).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sdist_wheels import SOURCE_BUILDS, build, name_and_version, source_pins
from testcase_lock import MAKE_COMMAND, index_args, lab_target_args, lock_path, merge_locks

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


def locks(manifests: list[Path], wheelhouse_set: str = "default") -> list[Path]:
    """The locks of the manifests in ``wheelhouse_set``; a manifest without one is refused, naming the fix."""
    chosen = [
        m for m in manifests if yaml.safe_load(m.read_text()).get("wheelhouse", "default") == wheelhouse_set
    ]
    missing = [str(lock_path(m)) for m in chosen if not lock_path(m).is_file()]
    if missing:
        sys.exit(
            f"wheelhouse: no lock {', '.join(missing)}: make it with `{MAKE_COMMAND}`; nothing downloaded."
        )
    return [lock_path(m) for m in chosen]


def download_locked(locks: list[Path], dest: Path) -> None:
    """The files the locks pin, by hash, for the lab's nodes: nothing is resolved here.

    --no-deps: each lock is a whole closure already (the virtualenv's install checks that). A dropped
    connection on a cold cache costs a retry, not the run (pip's default is 5 quick ones);
    TRAINSTACK_TORCH_INDEX adds an index (such as PyTorch's CPU one).
    """
    argv = [sys.executable, "-m", "pip", "download", "--retries", "10", "--no-deps", "--require-hashes"]
    # --find-links dest: the wheels built there from source distributions (source_wheels) are found by hash.
    argv += [*lab_target_args(), *index_args(), "--find-links", str(dest), "--dest", str(dest)]
    with tempfile.TemporaryDirectory(prefix="wheelhouse-") as tmp:
        for merged in merge_locks(locks, Path(tmp)):
            subprocess.run([*argv, "-r", str(merged)], check=True)


def source_wheels(manifests: list[Path], wheelhouse_set: str, dest: Path) -> list[Path]:
    """Wheels built into ``dest`` for the set's pins that PyPI publishes only as source (DeepSpeed).

    Built reproducibly (scripts/sdist_wheels.py), so the hash the lock pins is the built wheel's.
    """
    chosen = [
        m for m in manifests if yaml.safe_load(m.read_text()).get("wheelhouse", "default") == wheelhouse_set
    ]
    return [build(req, dest, SOURCE_BUILDS[name_and_version(req)[0]]) for req in source_pins(chosen)]


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
    case_locks = locks(args.manifests, args.wheelhouse_set)
    print(
        f"wheelhouse ({args.wheelhouse_set}): " + " ".join(requirements(args.manifests, args.wheelhouse_set))
    )
    source_wheels(args.manifests, args.wheelhouse_set, args.dest)
    # The slow set only serves test-case virtualenvs; the default one also the image's locked CPU torch stack.
    download_locked(case_locks + (CPU_LOCKS if args.wheelhouse_set == "default" else []), args.dest)
    check_cpu_torch(args.dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
