"""The images' Python packages are hash-pinned per stack and build variant (stacks/locks/<id>.pytorch-*.txt).

roles/pytorch installs with `pip --require-hashes` from these files plus torch's own wheel (pinned by the
stack's sha256); a lock that lacks an extra package, holds torch, or pins another NCCL than torch's would fail
the build or load the wrong library, so the files are checked against the stacks here.
"""

import re

import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.stack import stack_matrix as sm

from tests.support import REPO

STACKS = REPO / "stacks"
_REQUIREMENT_RE = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>[A-Za-z0-9.+!_-]+)")


def parse(path):
    """{normalised name: [(version, hashes)]} of a hash-pinned requirements file."""
    entries: dict[str, list[tuple[str, list[str]]]] = {}
    current = None
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if not line.startswith(" "):
            match = _REQUIREMENT_RE.match(line)
            assert match, f"{path.name}: '{line}' is not a name==version requirement"
            current = (match["version"], [])
            entries.setdefault(re.sub(r"[-_.]+", "-", match["name"]).lower(), []).append(current)
        else:
            current[1].extend(re.findall(r"--hash=sha256:([0-9a-f]{64})", line))
    return entries


def variants(stack):
    """{variant: torch artifacts} over the stack's scope (cuda unless a by_os override says cpu)."""
    found: dict[str, list[dict]] = {}
    for os_id in stack["scope"]["os"]:
        for arch in stack["scope"]["arch"]:
            comp = sm.resolve(stack, os_id, arch).get("pytorch")
            if comp:
                found.setdefault(comp.get("variant", "cuda"), []).extend(comp["artifacts"])
    return found


CASES = [
    (path, variant, artifacts)
    for path in sorted(STACKS.glob("ts-*.yml"))
    for variant, artifacts in variants(yaml.safe_load(path.read_text())).items()
]


@pytest.mark.parametrize(("stack_file", "variant", "wheels"), CASES, ids=lambda v: getattr(v, "stem", str(v)))
def test_lock_for_every_verifiable_variant(stack_file, variant, wheels):
    stack = yaml.safe_load(stack_file.read_text())
    lock = STACKS / "locks" / f"{stack['id']}.pytorch-{variant}.txt"
    if not any(w["sha256"] for w in wheels):
        pytest.skip(
            f"{stack['id']} has no verified torch {variant} wheel: nothing to lock its dependencies for"
        )
    assert lock.is_file(), f"{lock.relative_to(REPO)} is missing (stacks/locks/README.md says how to make it)"
    entries = parse(lock)
    assert "torch" not in entries, "torch is pinned by the stack's sha256, not by the lock"
    for name, pins in entries.items():
        for version, hashes in pins:
            assert hashes, f"{lock.name}: {name}=={version} has no --hash"
    comp = next(c for o in stack["scope"]["os"] for c in [sm.resolve(stack, o, "x86_64").get("pytorch")] if c)
    for extra in comp.get("extra_packages") or []:
        name, version = extra.split("==")
        pinned = [v for v, _digests in entries.get(name.lower(), [])]
        assert version in pinned, f"{lock.name} does not pin {extra}"
    if variant == "cuda":
        nccl = f"nvidia-nccl-cu{comp['cuda_runtime'].split('.')[0]}"
        assert [v for v, _digests in entries[nccl]] == [comp["nccl_pin"]], (
            f"{lock.name}: {nccl} is not the stack's pin"
        )
    else:
        assert not [n for n in entries if n.startswith("nvidia-")], "a CPU lock must not pull CUDA libraries"
