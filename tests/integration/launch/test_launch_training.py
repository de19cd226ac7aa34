"""launch_training on the lab: real FSDP across two Slurm nodes, failures reported, relaunches resumed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import ansible_env, on_lab_node

from .conftest import SHARED, fsdp_on_both_nodes, launch, nothing_submitted, results_dir

pytestmark = pytest.mark.lab


def test_fsdp_on_two_nodes(lab_ready: None) -> None:
    name = f"it-fsdp-{os.getpid()}"
    proc = launch(*fsdp_on_both_nodes(name))
    out = results_dir(proc.stdout)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2
    assert summary["nodes"] == 2
    assert summary["final_loss"] < summary["first_loss"]
    assert summary["tokens_per_s"] > 0
    assert "COMPLETED on ts-compute1,ts-compute2" in proc.stdout
    assert (out / "job.log").read_text().count("TRAINSTACK_METRIC") >= summary["steps"] - 1


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["-e", "training_job_testcase=pytorch/no-such-case"],
            "Unknown test case 'pytorch/no-such-case'. Known:",
        ),
        (
            ["-e", "training_job_testcase=pytorch/fsdp", "-e", "training_job_nodes=5"],
            "5 nodes requested but partition 'default' has 2",
        ),
        (
            ["-e", "training_job_testcase=pytorch/fsdp", "-e", '{"training_job_args": {"no-such-flag": 1}}'],
            "pytorch/fsdp has no option(s) ['--no-such-flag']",
        ),
        (
            ["-e", "training_job_testcase=pytorch/fsdp", "-e", '{"training_job_args": {"config": "llama9"}}'],
            "Unknown config llama9",
        ),
    ],
    ids=["unknown-testcase", "too-many-nodes", "unknown-argument", "unknown-config"],
)
def test_bad_request_submits_nothing(lab_ready: None, extra: list[str], message: str) -> None:
    name = f"it-bad-{os.getpid()}"
    proc = launch(*extra, "-e", f"training_job_name={name}", check=False)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr
    assert nothing_submitted(name)


def test_lost_node_fails_the_launch_and_a_relaunch_resumes(lab_ready: None) -> None:
    name = f"it-resume-{os.getpid()}"
    # Without requeueing (training_job_max_restarts=0) a lost node ends the job; test_lab_self_healing.py has
    # the requeued job that resumes by itself.
    common = fsdp_on_both_nodes(
        name, "-e", "training_job_checkpoint_every=5", "-e", "training_job_max_restarts=0"
    )
    first = subprocess.Popen(  # the launch that loses a node
        [
            str(Path(".venv/bin/ansible-playbook").resolve()),
            "trainstack.cluster.launch_training",
            "-i",
            "inventories/local",
            *common,
            "-e",
            '{"training_job_args": {"steps": 2000}}',
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=ansible_env(),
    )
    ckpt = SHARED / "trainstack" / "checkpoints" / name
    try:
        deadline = time.monotonic() + 300
        while not any(ckpt.glob("step-*/train_state.json")):
            assert time.monotonic() < deadline, "no checkpoint was written"
            assert first.poll() is None, first.communicate()[0][-3000:]
            time.sleep(2)
        subprocess.run(["lxc-stop", "-k", "-n", "ts-compute2"], check=True)
        out, _ = first.communicate(timeout=600)
    finally:
        subprocess.run(["lxc-start", "-n", "ts-compute2", "-d"], check=False)
    assert first.returncode != 0
    assert re.search(r"pytorch/fsdp job \d+ ended (NODE_FAIL|FAILED)", out), out[-3000:]
    assert "Last lines of its log" in out

    _wait_node_idle("ts-compute2")
    proc = launch(*common, "-e", '{"training_job_args": {"steps": 2000, "max-steps-this-run": 5}}')
    summary = json.loads((results_dir(proc.stdout) / "summary.json").read_text())
    assert summary["resumed_from_step"] >= 5
    assert summary["resumed_from_step"] % 5 == 0


def _wait_node_idle(node: str) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        state = on_lab_node(f"sinfo --noheader --Node --nodes={node} --format=%T", check=False)
        if state == "idle":
            return
        time.sleep(3)
    raise AssertionError(f"{node} did not come back idle")
