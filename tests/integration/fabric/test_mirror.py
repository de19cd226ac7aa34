"""The fabric mirror (scripts/fabric_mirror.py): the real release sources, reproducible stand-ins only where
there is no public source, a lock the artifact layer trusts, tampering refused."""

from __future__ import annotations

import hashlib
import json
import socket
import tarfile

import pytest
from ansible_collections.trainstack.cluster.plugins.module_utils.artifact import artifact_fetch

from scripts import fabric_mirror as mirror
from tests.support import CURRENT_STACK_FILE, CURRENT_STACK_ID, REPO

STACK = CURRENT_STACK_FILE
PREVIOUS = REPO / "stacks" / "ts-2026.10.yml"
UPSTREAM = mirror.default_upstream()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_stand_ins_are_reproducible_and_say_what_they_are(tmp_path):
    """Only the downloads with no public source are stand-ins; an older stack's release sources, which neither
    its lock nor the upstream directory holds, are not served at all (no stand-in takes their place)."""
    first = mirror.build(PREVIOUS, tmp_path / "a")
    second = mirror.build(PREVIOUS, tmp_path / "b")
    assert first == second
    assert set(first["artifacts"]) == {"aws-efa-installer"}
    assert all(entry["standin"] for entry in first["artifacts"].values())
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["aws-efa-installer", "lock.json"]
    with tarfile.open(tmp_path / "a" / "aws-efa-installer" / "aws-efa-installer-1.50.0.tar.gz") as tar:
        script = tar.extractfile("aws-efa-installer/efa_installer.sh").read().decode()
    assert "STAND-IN" in script and 'VERSION="1.50.0"' in script


REAL = ("enroot-src", "pyxis-src", "aws-ofi-nccl-src", "nccl-tests-src")


def test_current_stack_mirrors_the_real_release_sources(tmp_path):
    """enroot, pyxis, aws-ofi-nccl and nccl-tests are the upstream directory's release sources, byte for byte,
    under the URL's file name, with the sha256 the stack's lock records; the rest stay named stand-ins."""
    lock = mirror.build(STACK, tmp_path)
    committed = json.loads((REPO / "stacks" / "locks" / f"{CURRENT_STACK_ID}.lock.json").read_text())[
        "artifacts"
    ]
    for name in REAL:
        entry = lock["artifacts"][name]
        served = tmp_path / name / entry["url"].rsplit("/", 1)[-1]
        assert served.read_bytes() == (UPSTREAM / served.name).read_bytes()
        assert entry["standin"] is False
        assert entry["sha256"] == committed[name]["sha256"] == hashlib.sha256(served.read_bytes()).hexdigest()
    assert {n for n, e in lock["artifacts"].items() if e["standin"]} == {
        "aws-efa-installer",
        "aws-pcs-agent",
    }


def test_mirror_refuses_an_upstream_source_the_lock_does_not_vouch_for(tmp_path):
    """Other bytes under the release's name (a re-packed tarball) are refused before anything is served."""
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    for source in UPSTREAM.glob("*.tar.gz"):
        (upstream / source.name).write_bytes(source.read_bytes())
    pyxis = upstream / "pyxis-0.24.0.tar.gz"
    pyxis.write_bytes(pyxis.read_bytes() + b"\0")
    with pytest.raises(
        SystemExit, match=r"pyxis-src: .*pyxis-0\.24\.0\.tar\.gz has sha256 [0-9a-f]{64}, the stack's lock"
    ):
        mirror.build(STACK, tmp_path / "mirror", upstream)
    assert not (tmp_path / "mirror" / "lock.json").exists()


def test_mirror_names_a_missing_upstream_directory(tmp_path):
    # The first real source in the stack's order is named.
    with pytest.raises(
        SystemExit, match=f"aws-ofi-nccl-src: {tmp_path}/none/aws-ofi-nccl-1.21.1.tar.gz is missing"
    ):
        mirror.build(STACK, tmp_path / "mirror", tmp_path / "none")


def test_artifact_layer_fetches_over_http_verified_by_the_lock(tmp_path):
    directory = tmp_path / "mirror"
    lock = mirror.build(STACK, directory)
    port = _free_port()
    mirror.serve(directory, "127.0.0.1", port)
    try:
        entry = lock["artifacts"]["aws-ofi-nccl-src"]
        result = artifact_fetch.fetch(
            "aws-ofi-nccl-src",
            entry["url"],
            str(tmp_path / "out.tar.gz"),
            mirror=f"http://127.0.0.1:{port}",
            lock=lock,
        )
        assert result.verified and result.sha256 == entry["sha256"]
        assert result.source.startswith(f"http://127.0.0.1:{port}/aws-ofi-nccl-src/")

        # A tampered mirror file is refused with both hashes.
        served = directory / "aws-ofi-nccl-src" / "aws-ofi-nccl-1.21.1.tar.gz"
        served.write_bytes(served.read_bytes() + b"tampered")
        with pytest.raises(artifact_fetch.ChecksumMismatchError) as err:
            artifact_fetch.fetch(
                "aws-ofi-nccl-src",
                entry["url"],
                str(tmp_path / "again.tar.gz"),
                mirror=f"http://127.0.0.1:{port}",
                lock=lock,
            )
        assert entry["sha256"] in str(err.value)
        assert hashlib.sha256(served.read_bytes()).hexdigest() in str(err.value)
    finally:
        mirror.stop(directory)
    assert not (directory / ".server.pid").exists()
