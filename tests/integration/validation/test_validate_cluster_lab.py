"""validate_cluster on the 3-node lab with real Slurm, in one run (each run takes about a minute on the lab):
ts-head is healthy; ts-compute2 is drained in Slurm before the run; ts-compute1 is told to require a mount it
does not have, with the drain option on. Each fault must be caught and named, the healthy node must pass with
its hardware checks skipped for a reason, and ts-compute1 must end drained with the failed check as reason."""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.support import playbook

from .conftest import on_node

pytestmark = pytest.mark.lab
FAULTS = """\
node_health_drain_failed: true
node_health_expect_overrides:
  mounts: "{{ ['/shared', '/fsx'] if inventory_hostname == 'ts-compute1' else ['/shared'] }}"
"""


@pytest.fixture(scope="module")
def run(lab_slurm, tmp_path_factory):
    """The playbook run with the faults injected; nodes are resumed afterwards whatever happens."""
    results = tmp_path_factory.mktemp("node_health")
    extra = results / "faults.yml"
    extra.write_text(FAULTS)
    on_node("ts-head", "scontrol update NodeName=ts-compute2 State=DRAIN Reason=injected-by-test")
    try:
        done = playbook(
            "validate_cluster", "-i", "inventories/local", "-e", f"node_health_results_dir={results}",
            "-e", f"@{extra}", check=False,
        )  # fmt: skip
        drained = on_node("ts-head", "sinfo -h -N -n ts-compute1 -o '%T|%E'").stdout.strip()
    finally:
        for node in ("ts-compute1", "ts-compute2"):
            on_node("ts-head", f"scontrol update NodeName={node} State=RESUME", check=False)
    reports = {p.stem: json.loads(p.read_text()) for p in results.glob("ts-*.json")}
    return (
        done,
        " ".join(done.stdout.split()),
        reports,
        json.loads((results / "summary.json").read_text()),
        drained,
    )


def rows(report):
    return {r["check"]: r for r in report["checks"]}


def test_play_fails_naming_node_and_check(run):
    done, out, _, summary, _ = run
    assert done.returncode != 0
    # "drained", or "draining"/"mixed+drain" while another job still runs there
    pattern = (
        r"ts-compute2 \(lab\) failed: slurm_state \[isolate\]: "
        r"Slurm state \S*drain\S* \(reason: injected-by-test\)"
    )
    assert re.search(pattern, out), out[-2000:]
    assert "ts-compute1 (lab) failed: mounts [isolate]: /fsx not mounted" in out
    assert {node: [f["check"] for f in failed] for node, failed in summary.items()} == {
        "ts-head": [],
        "ts-compute1": ["mounts"],
        "ts-compute2": ["slurm_state"],
    }


def test_healthy_node_passes_with_reasons_for_skips(run):
    report = run[2]["ts-head"]
    assert report["ok"] and report["failed"] == []
    for name in ("gpu_inventory", "efa_devices", "efa_libfabric", "gpu_nvlink", "dcgm_diag", "torch_env"):
        assert rows(report)[name]["status"] == "skip" and rows(report)[name]["message"], name
    for name in ("memlock", "memory", "disks", "mounts"):
        assert rows(report)[name]["status"] == "pass", name


def test_idle_compute_node_state_passes(run):
    assert rows(run[2]["ts-compute1"])["slurm_state"]["status"] == "pass"


def test_drain_option_drained_with_the_reason(run):
    state = run[4]
    assert "drain" in state.split("|")[0] and state.endswith("|node_health: mounts"), state


HOOK_FAULT = """\
node_health_slurm_hooks: true
node_health_run: false
node_health_expect_overrides: {mounts: [/shared, /fsx]}
"""


@pytest.mark.slow
def test_prolog_drains_a_failing_node_through_slurm(lab_slurm, tmp_path, resume_nodes):
    """The quick checks as the Slurm role's prolog.d entry: a job on a node missing a required mount makes
    slurmd's prolog fail, and Slurm itself drains the node. The hook is removed afterwards."""
    resume_nodes.append("ts-compute1")
    extra = tmp_path / "hook.yml"
    extra.write_text(HOOK_FAULT)
    try:
        playbook("validate_cluster", "-i", "inventories/local", "--limit", "ts-compute1", "-e", f"@{extra}")
        job = on_node("ts-head", "sbatch --parsable -w ts-compute1 -t 1 --wrap true").stdout.strip()
        state = ""
        for _ in range(60):
            state = on_node("ts-head", "sinfo -h -N -n ts-compute1 -o '%T|%E'").stdout.strip()
            if "drain" in state.split("|")[0]:
                break
            time.sleep(1)
        report = json.loads(on_node("ts-compute1", "cat /var/lib/trainstack/node_health/prolog.json").stdout)
    finally:
        on_node("ts-head", f"scancel {job}" if "job" in locals() and job else "true", check=False)
        on_node("ts-compute1", "rm -f /etc/slurm/prolog.d/50-trainstack-node-health.sh "
                "/etc/slurm/epilog.d/50-trainstack-node-health.sh", check=False)  # fmt: skip
    assert "drain" in state.split("|")[0] and "rolog" in state.split("|")[1], state
    assert [f["message"] for f in report["failed"]] == ["/fsx not mounted"]
