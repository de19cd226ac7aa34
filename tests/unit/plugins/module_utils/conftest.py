"""Shared fixtures for the stack matrix and artifact tests (image factory area)."""

import copy
import functools
import hashlib
import http.server
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[4]
COLLECTIONS = REPO / ".cache" / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

STACKS = REPO / "stacks"


@pytest.fixture(scope="session")
def rules():
    return yaml.safe_load((STACKS / "rules.yml").read_text())["rules"]


@pytest.fixture(scope="session")
def shipped_stacks():
    return {p.stem: yaml.safe_load(p.read_text()) for p in sorted(STACKS.glob("ts-*.yml"))}


def _component(version, **extra):
    base = {
        "version": version,
        "os": ["ubuntu-24.04"],
        "arch": ["x86_64"],
        "source": "https://example.invalid",
    }
    base.update(extra)
    return base


@pytest.fixture
def good_stack():
    """A stack passing every rule on ubuntu-24.04/x86_64 for p5 and p6-b200; tests break one field."""
    return copy.deepcopy(
        {
            "id": "ts-test",
            "status": "current",
            "scope": {"os": ["ubuntu-24.04"], "arch": ["x86_64"], "instance_families": ["p5", "p6-b200"]},
            "environment": {},
            "components": {
                "nvidia_driver": _component("595.91.07", kernel_modules="open"),
                "cuda": _component("13.2"),
                "nccl": _component("2.29.7", cuda_major=13),
                "efa_installer": _component("1.50.0"),
                "aws_ofi_nccl": _component("1.21.1"),
                "pytorch": _component("2.13.0", cuda_runtime="13.0", nccl_pin="2.29.7"),
            },
        }
    )


def _published_sha256(deb: Path) -> str | None:
    """SHA256 of a .deb as Debian's signed Packages index publishes it (apt-cache), or None."""
    name, version, _ = urllib.parse.unquote(deb.name).rsplit("_", 2)
    out = subprocess.run(
        ["apt-cache", "show", "--no-all-versions", f"{name}={version}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    for line in out.splitlines():
        if line.startswith("SHA256: "):
            return line.split()[1]
    return None


@pytest.fixture(scope="session")
def debian_debs(tmp_path_factory):
    """Two real Debian packages with the sha256 Debian publishes for them: the artifact tests' real files.

    Taken from apt's cache when there, else fetched with `apt-get download` (Debian mirrors are reachable).
    """
    found = []
    for deb in sorted(Path("/var/cache/apt/archives").glob("*.deb"), key=lambda p: p.stat().st_size)[:40]:
        digest = _published_sha256(deb)
        if digest and hashlib.sha256(deb.read_bytes()).hexdigest() == digest:
            found.append((deb, digest))
        if len(found) == 2:
            return found
    where = tmp_path_factory.mktemp("debs")
    subprocess.run(["apt-get", "download", "hello", "sl"], cwd=where, check=True, capture_output=True)
    return [(deb, _published_sha256(deb)) for deb in sorted(where.glob("*.deb"))]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        self.server.requests.append(self.path)


@pytest.fixture
def http_root(tmp_path):
    """A local HTTP server (loopback) serving tmp_path/www; yields (base_url, root, requests)."""
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", root, server.requests
    server.shutdown()
    server.server_close()
