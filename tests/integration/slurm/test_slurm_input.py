"""Bad Slurm definitions fail in the validation play, naming the problem, before any host changes."""

from __future__ import annotations

import json
import re

import pytest

from tests.support import playbook

pytestmark = pytest.mark.lab


def _fails_unchanged(*extra: str) -> str:
    proc = playbook("slurm_cluster", "-i", "inventories/local", *extra, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    recap = re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", out, re.M)
    assert recap, out[-3000:]
    assert all(changed == "0" for _, changed in recap), recap
    assert "PLAY [MUNGE on every node]" not in out, "a later play ran"
    return out


def test_partition_with_unknown_group(lab: None) -> None:
    partitions = [{"name": "gpu", "groups": ["p5_nodes"], "default": True}]
    out = _fails_unchanged("-e", json.dumps({"slurm_partitions": partitions}))
    assert "Partitions name unknown inventory groups: ['p5_nodes']" in out


def test_more_gpus_than_detected(lab: None) -> None:
    out = _fails_unchanged("-e", "slurm_gpus_per_node=8")
    assert "slurm_gpus_per_node=8 but nvidia-smi finds 0 GPU(s)" in out


def test_accounting_without_password(lab: None) -> None:
    out = _fails_unchanged("-e", "slurm_accounting_db_password=")
    assert "Slurm accounting needs slurm_accounting_db_password" in out
