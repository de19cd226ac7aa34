"""Fixtures of the validation area: the node_health script loaded from the role, and a probe that serves
recorded tool outputs (stand-ins written in each tool's documented format, see fixtures/README.md)."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import init_ansible_plugins

# Before any test module here imports Ansible: its plugin loader is set up once per process.
init_ansible_plugins()

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# The node_health scripts are staged side by side on the nodes and import each other by plain name.
sys.path.insert(0, str(ROOT / "roles/node_health/files"))


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


nh = load(ROOT / "roles/node_health/files/node_health.py", "trainstack_node_health")


@dataclass
class RecordedProbe(nh.Probe):
    """A Probe whose tools answer from a table: {"argv joined by spaces": (rc, output)}."""

    tools: dict = field(default_factory=dict)
    memlock_bytes: int = -1

    def which(self, name):
        return f"/usr/bin/{name}" if any(key.split()[0] == name for key in self.tools) else None

    def run(self, argv, timeout=None):
        key = " ".join(argv)
        if key in self.tools:
            return self.tools[key]
        return 127, f"not found: {argv[0]}"

    def memlock(self):
        return self.memlock_bytes


@pytest.fixture(scope="session")
def node_health():
    return nh


@pytest.fixture(scope="session")
def table_file(tmp_path_factory):
    """The table as the role writes it onto nodes (here with every catalog type)."""
    from ansible_collections.trainstack.cluster.plugins.module_utils.catalog.instance_catalog import default

    path = tmp_path_factory.mktemp("node_health") / "instance_types.json"
    path.write_text(json.dumps(default().health_table()), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def table(table_file):
    return nh.load_table(table_file)


@pytest.fixture
def probe_for(table, tmp_path):
    """probe_for(instance_type, tools={...}, **fields) -> RecordedProbe with an empty sysfs under tmp_path."""

    def make(instance_type, tools=None, **fields):
        expect = nh.expectations(table, instance_type, fields.pop("expect", None))
        return RecordedProbe(
            expect=expect, instance_type=instance_type, sysfs=tmp_path / "sys", tools=tools or {}, **fields
        )

    return make


@pytest.fixture(scope="session")
def fixture_text():
    return lambda name: (FIXTURES / name).read_text(encoding="utf-8")


# A stand-in ``srun`` for the acceptance tests (no Slurm on this host; the lab tests run the real one): it
# records its arguments in $FAKE_SRUN_ARGV, prints the file named by $FAKE_SRUN_FIXTURE, exits $FAKE_SRUN_RC.
FAKE_SRUN = """#!/bin/sh
printf '%s\\n' "$@" > "$FAKE_SRUN_ARGV"
cat "$FAKE_SRUN_FIXTURE"
exit "${FAKE_SRUN_RC:-0}"
"""


def fake_srun_dir(parent: Path) -> Path:
    """A directory holding only the stand-in ``srun``, to put first on PATH."""
    bin_dir = parent / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(FAKE_SRUN, encoding="utf-8")
    (bin_dir / "srun").chmod(0o755)
    return bin_dir
