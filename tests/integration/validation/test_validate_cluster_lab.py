"""validate_cluster on the 3-node lab: a healthy run, then faults injected into real nodes (a drained Slurm
node, a required mount that is missing), each caught and named; the drain option drains through real Slurm."""

from __future__ import annotations

import json

import pytest

from tests.support import playbook

from .conftest import on_node

pytestmark = pytest.mark.lab


def validate(tmp_path, *args, check=True):
    return playbook(
        "validate_cluster",
        "-i",
        "inventories/local",
        "-e",
        f"node_health_results_dir={tmp_path}",
        *args,
        check=check,
    )


def test_healthy_lab_passes(lab_slurm, tmp_path):
    validate(tmp_path)
    for node in ("ts-head", "ts-compute1", "ts-compute2"):
        report = json.loads((tmp_path / f"{node}.json").read_text())
        rows = {r["check"]: r for r in report["checks"]}
        assert report["ok"], report["failed"]
        assert rows["gpu_inventory"]["status"] == "skip" and rows["efa_devices"]["status"] == "skip"
        assert rows["mounts"]["status"] == "pass"
    compute = json.loads((tmp_path / "ts-compute1.json").read_text())
    assert {r["check"]: r for r in compute["checks"]}["slurm_state"]["status"] == "pass"
    assert json.loads((tmp_path / "summary.json").read_text()) == {
        "ts-head": [],
        "ts-compute1": [],
        "ts-compute2": [],
    }


def test_faults_are_caught_named_and_drained(lab_slurm, tmp_path, resume_nodes):
    """One run, two injected faults: ts-compute2 drained in Slurm, ts-compute1 missing a required mount; the
    drain option drains ts-compute1 with the failed check as its reason. The healthy run above puts the nodes'
    configuration back (it is rewritten on every run)."""
    resume_nodes.extend(["ts-compute1", "ts-compute2"])
    on_node("ts-head", "scontrol update NodeName=ts-compute2 State=DRAIN Reason=injected-by-test")
    extra = tmp_path / "faults.yml"
    extra.write_text(
        "node_health_drain_failed: true\n"
        "node_health_expect_overrides:\n"
        "  mounts: \"{{ ['/shared', '/fsx'] if inventory_hostname == 'ts-compute1' else ['/shared'] }}\"\n"
    )
    done = validate(tmp_path, "--limit", "compute", "-e", f"@{extra}", check=False)
    out = " ".join(done.stdout.split())
    assert done.returncode != 0
    assert (
        "ts-compute2 (lab) failed: slurm_state [isolate]: Slurm state drained (reason: injected-by-test)"
        in out
    )
    assert "ts-compute1 (lab) failed: mounts [isolate]: /fsx not mounted" in out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert {node: [f["check"] for f in failed] for node, failed in summary.items()} == {
        "ts-compute1": ["mounts"],
        "ts-compute2": ["slurm_state"],
    }
    state = on_node("ts-head", "sinfo -h -N -n ts-compute1 -o '%T|%E'").stdout.strip()
    assert state.startswith("drain") and state.endswith("|node_health: mounts"), state
