"""Shared fixtures for the stack matrix and artifact tests (image factory area)."""

import copy
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import real_debian_debs, serve_directory

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


@pytest.fixture(scope="session")
def debian_debs(tmp_path_factory):
    """Two real Debian packages with the sha256 Debian publishes for them: the artifact tests' real files."""
    return real_debian_debs(tmp_path_factory.mktemp("debs"))


@pytest.fixture
def http_root(tmp_path):
    """A local HTTP server (loopback) serving tmp_path/www; yields (base_url, root, requests)."""
    root = tmp_path / "www"
    root.mkdir()
    with serve_directory(root) as (url, requests):
        yield url, root, requests
