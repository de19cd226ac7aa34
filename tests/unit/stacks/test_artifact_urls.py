"""Every artifact a stack downloads is a fixed file: a versioned URL, and a checksum or a stated reason.

A URL that names a moving target ('latest', a branch archive) installs whatever is newest on the day of the
build; its sha256 (stack or lock) then fails the build the day the vendor publishes, or, unchecked, lets other
bytes in. The stack checker refuses such a URL (stack_matrix.moving_url_problems, run by validate_stack).
"""

import json

import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.stack import stack_matrix as sm

from tests.support import CURRENT_STACK_FILE

# Artifacts of the current stack with no sha256 in the stack or its lock, and no `verify: false`: a build
# refuses each until `make mirror` locks it (docs/stacks.md, "Checksums: never invented"). Their vendors
# publish no digest for these files and their hosts cannot be reached from the network the stack was written
# on. The list only shrinks: an entry that gains a digest must leave it, and a new artifact may not join it.
KNOWN_UNLOCKED = {
    "aws-efa-installer": "efa-installer.amazonaws.com unreachable here; AWS publishes no digest for 1.50.0",
    "gdrcopy-src": "GitHub's tag archive: no published digest, not mirrored here yet",
    "nvidia-driver-run-aarch64": "us.download.nvidia.com unreachable here; no published digest",
    "nvidia-driver-run-x86_64": "us.download.nvidia.com unreachable here; no published digest",
    "slurm-src": "download.schedmd.com unreachable here; SchedMD publishes SHA-1 only",
}


@pytest.mark.parametrize(
    ("url", "marker"),
    [
        ("https://aws-pcs-repo-r.s3.amazonaws.com/aws-pcs-agent/aws-pcs-agent-v1-latest.tar.gz", "latest"),
        ("https://example.com/tools/latest/tool.tar.gz", "latest"),
        ("https://example.com/builds/nightly/tool.tar.gz", "nightly"),
        ("https://example.com/tool-current.run", "current"),
        ("https://example.com/tool_SNAPSHOT.jar", "SNAPSHOT"),
        ("https://github.com/o/r/archive/refs/heads/main.tar.gz", "main"),
        ("https://github.com/o/r/archive/master.zip", "master"),
        ("https://codeload.github.com/o/r/tarball/HEAD", "HEAD"),
        ("https://raw.githubusercontent.com/o/r/raw/main/install.sh", "main"),
        ("https://github.com/NVIDIA/gdrcopy/archive/refs/tags/v2.5.2.tar.gz", None),
        ("https://github.com/o/r/archive/v1.2/main-1.2.tar.gz", None),
        ("https://example.com/latestness-1.0.tar.gz", None),
        ("https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28.whl", None),
    ],
)
def test_moving_url_marker(url, marker):
    assert sm.moving_url_marker(url) == marker


def test_no_artifact_url_of_any_stack_names_a_moving_target(stack_file):
    stack = yaml.safe_load(stack_file.read_text())
    assert sm.moving_url_problems(stack) == []


def test_the_checker_refuses_a_moving_url_naming_the_key(current_stack):
    art = current_stack["components"]["gdrcopy"]["artifacts"][0]
    art["url"] = "https://github.com/NVIDIA/gdrcopy/archive/refs/heads/master.tar.gz"
    with pytest.raises(sm.StackError, match=r"components\.gdrcopy\.artifacts\[0\]\.url: .* \('master'\)"):
        sm.validate_stack(current_stack)


def _unpinned(stack: dict, lock: dict) -> dict[str, dict]:
    """Artifacts with no sha256 in the stack or in the lock for the same URL, and no `verify: false`."""
    locked = lock["artifacts"]
    return {
        art["name"]: art
        for art in sm.all_artifacts(stack)
        if not art.get("sha256")
        and not (locked.get(art["name"], {}).get("sha256") and locked[art["name"]]["url"] == art["url"])
        and art.get("verify") is not False
    }


def test_every_artifact_of_the_current_stack_has_a_sha256_or_a_reason():
    stack = yaml.safe_load(CURRENT_STACK_FILE.read_text())
    lock = json.loads((CURRENT_STACK_FILE.parent / "locks" / f"{stack['id']}.lock.json").read_text())
    unpinned = _unpinned(stack, lock)
    new = sorted(set(unpinned) - set(KNOWN_UNLOCKED))
    assert new == [], "give these a sha256, a lock entry or verify: false"
    assert sorted(set(KNOWN_UNLOCKED) - set(unpinned)) == [], "pinned now: take them out of KNOWN_UNLOCKED"
    for art in sm.all_artifacts(stack):
        if art.get("verify") is False:
            assert len(art.get("unverified_reason") or "") >= 10, art["name"]
