"""Every shipped stack has a committed lock file, and it agrees with the stack it locks.

A lock entry vouches for one URL's bytes; a lock that drifts from its stack (a renamed artifact, a new URL, a
digest that disagrees with the stack's) would either vouch for nothing or contradict the stack at build time.
"""

import importlib.util
import json

import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.stack import stack_matrix as sm

from tests.support import REPO

HEX64 = set("0123456789abcdef")


def load(stack_file):
    stack = yaml.safe_load(stack_file.read_text())
    lock_path = stack_file.parent / "locks" / f"{stack['id']}.lock.json"
    assert lock_path.is_file(), (
        f"{lock_path} is missing: run scripts/stack_lock.py (or make mirror) and commit it"
    )
    return stack, json.loads(lock_path.read_text())


def test_lock_names_its_stack(stack_file):
    stack, lock = load(stack_file)
    assert lock["format"] == 1 and lock["stack"] == stack["id"]


def test_every_lock_entry_is_an_artifact_of_the_stack_at_the_same_url(stack_file):
    stack, lock = load(stack_file)
    artifacts = {a["name"]: a for a in sm.all_artifacts(stack)}
    for name, entry in lock["artifacts"].items():
        assert name in artifacts, f"{stack['id']} lock: '{name}' is not an artifact of the stack"
        assert entry["url"] == artifacts[name]["url"], (
            f"{stack['id']} lock: '{name}' was locked for another URL"
        )
        assert len(entry["sha256"]) == 64 and set(entry["sha256"]) <= HEX64
        if "published" in entry:
            # A digest the vendor publishes (the page that lists it), recorded without the file: no size.
            assert entry["published"].startswith("https://") and "size" not in entry, name
        else:
            assert isinstance(entry["size"], int) and entry["size"] > 0
        if artifacts[name]["sha256"]:
            assert entry["sha256"] == artifacts[name]["sha256"], (
                f"{stack['id']}: lock and stack disagree on {name}"
            )


def test_every_digest_the_stack_knows_is_locked(stack_file):
    """The lock is the complete record of what was verified: a stack digest not in it was never checked."""
    stack, lock = load(stack_file)
    known = {a["name"] for a in sm.all_artifacts(stack) if a["sha256"]}
    assert known - set(lock["artifacts"]) == set()


def test_the_checker_counts_locked_artifacts_as_verified(stack_file):
    stack, lock = load(stack_file)
    noted = {n.message.split(" ")[0] for n in sm.unverified_notes(stack, lock)}
    assert noted.isdisjoint(lock["artifacts"])


def test_lock_writer_refuses_a_digest_that_disagrees_with_the_stack(tmp_path, current_stack):
    """Offline: the one artifact is the lab CPU wheel, and the local copy offered for it is not that wheel."""
    spec = importlib.util.spec_from_file_location("stack_lock", REPO / "scripts" / "stack_lock.py")
    stack_lock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stack_lock)
    pytorch = {**current_stack["components"]["pytorch"], "artifacts": []}
    art = pytorch["by_os"]["debian-12"]["artifacts"][0]
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"not the wheel")
    with pytest.raises(SystemExit, match=f"the stack pins {art['sha256']}"):
        stack_lock.build_lock({**current_stack, "components": {"pytorch": pytorch}}, {}, [tmp_path])
