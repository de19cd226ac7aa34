"""launch_training on the lab with deepspeed/zero3: DeepSpeed's ZeRO-3 across two Slurm nodes (gloo, CPU),
its virtualenv installed from the slow wheelhouse's lock (DeepSpeed's wheel built there from its source
distribution), pytorch/fsdp's metric lines parsed into the results table; a ZeRO stage DeepSpeed does not have
refused before anything is submitted; and DeepSpeed's checkpoint resuming a relaunch after a node was killed.
Slow: the first launch copies the slow wheelhouse and builds a virtualenv from it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.support import ansible_env, on_lab_node

from .conftest import SHARED, launch, nothing_submitted, results_dir, slow_case_on_both_nodes

pytestmark = [pytest.mark.lab, pytest.mark.slow]
SLOW_WHEELHOUSE = Path(".cache/wheelhouse-slow").resolve()


@pytest.fixture(scope="module")
def slow_wheelhouse(lab_ready: None) -> Path:
    subprocess.run(["make", "wheelhouse-slow"], check=True, capture_output=True)
    return SLOW_WHEELHOUSE


def zero_on_both_nodes(name: str, wheelhouse: Path, args: dict, *extra: str) -> list[str]:
    return slow_case_on_both_nodes(
        "deepspeed/zero3", name, wheelhouse, "-e", json.dumps({"training_job_args": args}), *extra
    )


def test_zero3_on_two_nodes(slow_wheelhouse: Path) -> None:
    name = f"it-ds-{os.getpid()}"
    proc = launch(*zero_on_both_nodes(name, slow_wheelhouse, {}))
    out = results_dir(proc.stdout)
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["testcase"], summary["world_size"], summary["nodes"], summary["zero_stage"]) == (
        "deepspeed/zero3",
        2,
        2,
        3,
    )
    assert summary["final_loss"] < summary["first_loss"] - 0.5, summary["losses"]
    assert summary["jit_ops"] == [] and summary["accelerator"] == "cpu"
    assert "COMPLETED on ts-compute1,ts-compute2" in proc.stdout
    assert (out / "job.log").read_text().count("TRAINSTACK_METRIC") == summary["steps"]


def test_a_zero_stage_deepspeed_lacks_submits_nothing(slow_wheelhouse: Path) -> None:
    name = f"it-ds-stage-{os.getpid()}"
    proc = launch(*zero_on_both_nodes(name, slow_wheelhouse, {"zero-stage": 4}), check=False)
    assert proc.returncode != 0
    assert (
        "deepspeed/zero3 refuses these arguments for 2 process(es) (2 node(s) x 1): "
        "--zero-stage 4 is not a ZeRO stage"
    ) in proc.stdout + proc.stderr
    assert nothing_submitted(name)


def test_a_relaunch_after_a_lost_node_resumes_from_deepspeeds_checkpoint(slow_wheelhouse: Path) -> None:
    name = f"it-ds-resume-{os.getpid()}"
    long_run = {"steps": 2000}
    # Without requeueing (training_job_max_restarts=0) a lost node ends the job; test_lab_self_healing.py has
    # the requeue.
    common = ("-e", "training_job_checkpoint_every=5", "-e", "training_job_max_restarts=0")
    first = subprocess.Popen(  # the launch that loses a node
        [
            str(Path(".venv/bin/ansible-playbook").resolve()),
            "trainstack.cluster.launch_training",
            "-i",
            "inventories/local",
            *zero_on_both_nodes(name, slow_wheelhouse, long_run, *common),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=ansible_env(),
    )
    latest = SHARED / "trainstack" / "checkpoints" / name / "latest"  # published once every rank wrote
    try:
        deadline = time.monotonic() + 600
        while not latest.is_file():
            assert time.monotonic() < deadline, "no checkpoint was published"
            assert first.poll() is None, first.communicate()[0][-3000:]
            time.sleep(2)
        subprocess.run(["lxc-stop", "-k", "-n", "ts-compute2"], check=True)
        out, _err = first.communicate(timeout=600)
    finally:
        subprocess.run(["lxc-start", "-n", "ts-compute2", "-d"], check=False)
    assert first.returncode != 0, out[-3000:]

    deadline = time.monotonic() + 180
    while on_lab_node("sinfo --noheader --Node --nodes=ts-compute2 --format=%T", check=False) != "idle":
        assert time.monotonic() < deadline, "ts-compute2 did not come back idle"
        time.sleep(3)
    again = {**long_run, "max-steps-this-run": 5}
    proc = launch(*zero_on_both_nodes(name, slow_wheelhouse, again, *common))
    summary = json.loads((results_dir(proc.stdout) / "summary.json").read_text())
    assert summary["resumed_from_step"] >= 5 and summary["resumed_from_step"] % 5 == 0
    assert summary["steps_this_run"] == 5 and summary["zero_stage"] == 3
