#!/usr/bin/env python3
"""Plan the local image build's stages before Packer runs (make image-local): key each stage by its inputs,
find the last stage whose snapshot is whole, and write the plan the build reads.

The plan (JSON) names the stages in order with their keys, the snapshot the build container starts from
(Packer's template reads ``resume.snapshot`` into the LXC template's --rootfs-from; empty: the debootstrap
base) and the variables the keys were made from; playbooks/build_image.yml (module image_stage) checks those
against its own before it skips a stage, then applies the stages after ``resume.after`` and snapshots each.
The rules are in plugins/module_utils/image/stages.py (keys) and stage_cache.py (snapshots);
docs/image-factory.md says why.

    .venv/bin/python scripts/image_stages.py --flavour slurm-gpu --stack ts-2026.12 \\
        --cache-dir /var/cache/trainstack/image --wheelhouse .cache/wheelhouse --out build/image/stages.json
"""

from __future__ import annotations

import argparse
import glob
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from ansible.release import __version__ as ansible_core_version

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / ".cache" / "collections"))

from ansible_collections.trainstack.cluster.plugins.module_utils.image import stage_cache as sc  # noqa: E402
from ansible_collections.trainstack.cluster.plugins.module_utils.image import stages as st  # noqa: E402
from ansible_collections.trainstack.cluster.plugins.module_utils.stack import stack_resolver as sr  # noqa: E402
from ansible_collections.trainstack.cluster.plugins.module_utils.stack.stack_matrix import (  # noqa: E402
    StackError,
    versions,
)

TEMPLATE = REPO / "packer" / "lxc" / "lxc-trainstack-debian"
HOST_CA_GLOB = "/usr/local/share/ca-certificates/*.crt"
# The local image's OS (the stack's lab OS): Debian 12 on the host's architecture.
LOCAL_OS = "debian-12"


def base_key(suite: str, mirror: str, template: Path = TEMPLATE) -> str:
    """The debootstrap root filesystem's key, as the LXC template computes it (one rule, asked of the
    template itself) and the template's own bytes: what it writes into every root filesystem."""
    proc = subprocess.run(
        ["bash", str(template), "--print-base-key", "--suite", suite, "--mirror", mirror],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise st.StageError(f"{template} --print-base-key failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def factory_flavours(repo: Path) -> dict[str, Any]:
    """build_image.yml's flavour -> roles table (its second play's image_flavours)."""
    plays = yaml.safe_load((repo / "playbooks" / "build_image.yml").read_text(encoding="utf-8"))
    return dict(plays[1]["vars"]["image_flavours"])


def build_variables(args: argparse.Namespace) -> dict[str, Any]:
    """The build's variables the keys cover and the playbook checks (the names are the playbook's)."""
    return {
        "flavour": args.flavour,
        "stack": args.stack,
        "artifact_mirror_url": args.mirror_url,
        "host_ca_certs": bool(args.host_ca_certs),
        "pytorch_wheelhouse": args.wheelhouse,
        "pytorch_testcases": args.testcases,
    }


def plan(args: argparse.Namespace, repo: Path = REPO) -> dict[str, Any]:
    """Every stage keyed, the resume point chosen (unusable snapshots removed on the way); raises StageError
    or StageCacheError naming the setting before anything is built."""
    problems = sc.cache_dir_problems(args.cache_dir)
    keep = sc.check_keep(args.keep)
    flavours = factory_flavours(repo)
    if args.flavour not in flavours:
        problems.append(
            f"IMAGE_FLAVOUR={args.flavour} is not a flavour of build_image.yml ({', '.join(flavours)})"
        )
    if problems:
        raise st.StageError("; ".join(problems))
    stacks = sr.stacks_dir(repo / "stacks")
    stack = sr.load_stack(stacks, args.stack)
    stack_id = str(stack["id"])
    entries = st.applied_entries(flavours[args.flavour], versions(stack, LOCAL_OS, args.arch))
    variables = build_variables(args)
    ca_files = sorted(glob.glob(HOST_CA_GLOB)) if args.host_ca_certs else []
    seed = st.seed_key(
        base_key(args.suite, args.lxc_mirror),
        st.file_digests(repo, st.SEED_PATHS),
        stack,
        st.file_digests(repo, ["stacks/locks"], [f"{stack_id}.*"])
        if (repo / "stacks" / "locks").is_dir()
        else [],
        {
            "flavour": args.flavour,
            "os": LOCAL_OS,
            "arch": args.arch,
            "artifact_mirror_url": args.mirror_url,
            "host_ca_certs": bool(args.host_ca_certs),
            "host_ca_cert_files": st.file_digests(Path("/"), [p.lstrip("/") for p in ca_files]),
            "image_cache_mounted": True,
            # The modules every role calls (ansible.builtin's apt, pip, copy, ...) are ansible-core's.
            "ansible_core": ansible_core_version,
        },
    )
    wheels = st.wheelhouse_listing(args.wheelhouse)
    inputs = {str(e["role"]): st.role_input(repo, str(e["role"]), variables, wheels) for e in entries}
    stages = st.stage_keys(seed, entries, inputs)
    problems = st.check_rebuild(stages, args.rebuild)
    if problems:
        raise st.StageError("; ".join(problems))
    stage_dicts = [
        {**s.as_dict(), "snapshot": str(sc.snapshot_paths(args.cache_dir, s.key).tar)} for s in stages
    ]
    resume = sc.choose_resume(stage_dicts, args.cache_dir, rebuild=args.rebuild)
    return {
        "format": 1,
        "flavour": args.flavour,
        "stack": stack_id,
        "cache_dir": args.cache_dir,
        "keep": keep,
        "rebuild": args.rebuild,
        "variables": variables,
        "seed": seed,
        "stages": stage_dicts,
        "resume": {"after": resume.after, "snapshot": resume.snapshot, "key": resume.key},
        "discarded": resume.discarded,
    }


def summary(result: dict[str, Any]) -> list[str]:
    """What the build will reuse and run, one line each (printed before Packer starts)."""
    after = result["resume"]["after"]
    lines = [f"image-stages: {entry['role']}: {entry['reason']}; discarded" for entry in result["discarded"]]
    for stage in result["stages"]:
        verb = "reuse" if stage["index"] <= after else "run"
        lines.append(f"image-stages: {stage['index']} {stage['role']} {stage['key'][:12]} {verb}")
    source = result["resume"]["snapshot"] or "the debootstrap base"
    lines.append(f"image-stages: the build container starts from {source}")
    return lines


def parser() -> argparse.ArgumentParser:
    """The planner's options; make image-local passes them from its variables."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--flavour", required=True)
    p.add_argument("--stack", required=True)
    p.add_argument("--cache-dir", default="/var/cache/trainstack/image")
    p.add_argument("--out", type=Path, required=True, help="where the plan (JSON) is written")
    p.add_argument(
        "--keep", default="8", help="snapshots kept in the cache directory (least recently used go)"
    )
    p.add_argument("--rebuild", default="", help="run this role's stage and every later one again")
    p.add_argument("--mirror-url", default="", help="artifact_mirror_url of the build")
    p.add_argument("--wheelhouse", default="", help="pytorch_wheelhouse of the build")
    p.add_argument("--testcases", default=None, help="pytorch_testcases as passed (names joined by commas)")
    p.add_argument("--no-host-ca-certs", dest="host_ca_certs", action="store_false")
    p.add_argument("--suite", default="bookworm")
    p.add_argument("--lxc-mirror", default="http://deb.debian.org/debian")
    p.add_argument("--arch", default=platform.machine())
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        result = plan(args)
    except (st.StageError, sc.StageCacheError, StackError) as exc:
        print(f"image-stages: {exc}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    part = args.out.with_name(f".{args.out.name}.part")
    part.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    part.replace(args.out)
    print("\n".join(summary(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
