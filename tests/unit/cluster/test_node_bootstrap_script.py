"""The node bootstrap script's refusals, run for real on this machine: each stops at its step, before anything
is installed, with one line on stderr naming the step (what ParallelCluster keeps as the node's bootstrap
error).

The steps that install (virtualenv, collections, the playbook) run on the lab's nodes:
tests/integration/cluster/test_node_bootstrap_lab.py.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO

pytestmark = pytest.mark.cluster

SCRIPT = REPO / "playbooks" / "files" / "node_bootstrap.sh"
PCLUSTER_FILES = (Path("/etc/chef/dna.json"), Path("/etc/parallelcluster/cfnconfig"))


@pytest.fixture
def bundle(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "bundle.tar.gz"
    path.write_bytes(b"not really a bundle\n")
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def bootstrap(work: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args, "--work-dir", str(work)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def failed_step(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    return proc.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["compute", "--sha256", "0" * 64], "step arguments failed: --bundle URL is required"),
        (
            ["compute", "--bundle", "file:///x", "--sha256", "ABC"],
            "step arguments failed: --sha256 must be 64",
        ),
        (
            ["gpu", "--bundle", "file:///x", "--sha256", "0" * 64],
            "step arguments failed: unknown argument 'gpu'",
        ),
    ],
    ids=["no-bundle", "bad-sha256", "unknown-role"],
)
def test_bad_arguments_fail_at_the_arguments_step(tmp_path: Path, args: list[str], line: str) -> None:
    proc = bootstrap(tmp_path / "work", *args)
    assert failed_step(proc).startswith(f"trainstack-bootstrap: {line}")
    assert not (tmp_path / "work").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="the script runs as root, as ParallelCluster runs it")
def test_a_wrong_sha256_fails_at_verify_and_installs_nothing(
    tmp_path: Path, bundle: tuple[Path, str]
) -> None:
    path, digest = bundle
    wrong = "f" * 64
    proc = bootstrap(tmp_path / "work", "compute", "--bundle", f"file://{path}", "--sha256", wrong)
    assert failed_step(proc) == (
        f"trainstack-bootstrap: step verify failed: sha256 of file://{path} is {digest}, expected {wrong}"
    )
    assert "[fetch] fetching" in proc.stdout
    assert not (tmp_path / "work" / "venv").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="the script runs as root, as ParallelCluster runs it")
@pytest.mark.parametrize(
    ("url", "line"),
    [
        (
            "ftp://example.org/b.tar.gz",
            "step fetch failed: unsupported bundle URL 'ftp://example.org/b.tar.gz'",
        ),
        ("file:///nonexistent/b.tar.gz", "step fetch failed: cannot copy /nonexistent/b.tar.gz"),
        ("http://127.0.0.1:9/b.tar.gz", "step fetch failed: download of http://127.0.0.1:9/b.tar.gz failed"),
    ],
    ids=["unsupported-scheme", "missing-file", "http-refused"],
)
def test_a_bundle_that_cannot_be_fetched_fails_at_fetch(tmp_path: Path, url: str, line: str) -> None:
    proc = bootstrap(tmp_path / "work", "compute", "--bundle", url, "--sha256", "0" * 64)
    assert failed_step(proc).startswith(f"trainstack-bootstrap: {line}")


@pytest.mark.skipif(os.geteuid() != 0, reason="the script runs as root, as ParallelCluster runs it")
@pytest.mark.skipif(any(p.exists() for p in PCLUSTER_FILES), reason="this machine is a ParallelCluster node")
def test_without_a_role_or_parallelcluster_files_it_fails_at_node_type(tmp_path: Path) -> None:
    proc = bootstrap(tmp_path / "work", "--bundle", "file:///x", "--sha256", "0" * 64)
    assert failed_step(proc) == (
        "trainstack-bootstrap: step node-type failed: no role argument and no node type in "
        "/etc/chef/dna.json (cluster.node_type) or /etc/parallelcluster/cfnconfig (cfn_node_type)"
    )
