"""launch_training on the lab with hf/finetune: LoRA on a transformers model read from the lab's shared
directory, sharded by accelerate's FSDP2 across two Slurm nodes (gloo, CPU), pytorch/fsdp's metric lines
parsed into the results table and the held-out loss in the summary; the test case's own rules refusing a
model directory without config.json before anything is submitted; and accelerate's checkpoints resuming a
relaunch after a node was killed. Slow: the first launch copies the slow wheelhouse and builds a virtualenv
from it (transformers, accelerate, PEFT).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import ansible_env, on_lab_node

from .conftest import SHARED, launch, nothing_submitted, results_dir, slow_case_on_both_nodes

pytestmark = [pytest.mark.lab, pytest.mark.slow]
SLOW_WHEELHOUSE = Path(".cache/wheelhouse-slow").resolve()
NODE_SHARED = Path("/shared")  # the same directory as the nodes mount it (lab_shared_mount)


@pytest.fixture(scope="module")
def slow_wheelhouse(lab_ready: None) -> Path:
    subprocess.run(["make", "wheelhouse-slow"], check=True, capture_output=True)
    return SLOW_WHEELHOUSE


@pytest.fixture(scope="module")
def tiny_model(lab_ready: None) -> Path:
    """The tiny shape with random weights in transformers' format on the shared directory, as nodes see it.

    Written by the case's make_model.py with the controller's torch and transformers (the test-case catalog's
    requirements), so the launched job reads a model directory it did not make.
    """
    where = SHARED / "models" / f"hf-tiny-{os.getpid()}"
    script = Path("testcases/hf/finetune/make_model.py")
    subprocess.run([sys.executable, str(script), "--init-config", "tiny", "--output", str(where)], check=True)
    return NODE_SHARED / where.relative_to(SHARED)


def hf_on_both_nodes(name: str, wheelhouse: Path, args: dict, *extra: str) -> list[str]:
    # A null value drops the manifest's default (--init-config tiny) from the command line.
    return slow_case_on_both_nodes(
        "hf/finetune",
        name,
        wheelhouse,
        "-e",
        json.dumps({"training_job_args": {"init-config": None, **args}}),
        *extra,
    )


def test_lora_from_a_model_directory_with_fsdp2_on_two_nodes(slow_wheelhouse: Path, tiny_model: Path) -> None:
    name = f"it-hf-{os.getpid()}"
    proc = launch(*hf_on_both_nodes(name, slow_wheelhouse, {"model-path": str(tiny_model)}))
    out = results_dir(proc.stdout)
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["testcase"], summary["world_size"], summary["nodes"]) == ("hf/finetune", 2, 2)
    assert (summary["fsdp"], summary["distributed_type"], summary["model"]) == (True, "FSDP", str(tiny_model))
    assert summary["final_loss"] < summary["first_loss"] - 1.0, summary["losses"]
    assert summary["eval_loss"] < summary["eval_loss_before"] - 1.0
    assert "COMPLETED on ts-compute1,ts-compute2" in proc.stdout
    assert (out / "job.log").read_text().count("TRAINSTACK_METRIC") == summary["steps"]


def test_a_model_directory_without_config_submits_nothing(slow_wheelhouse: Path) -> None:
    empty = SHARED / "models" / f"hf-empty-{os.getpid()}"
    empty.mkdir(parents=True, exist_ok=True)
    name = f"it-hf-nocfg-{os.getpid()}"
    node_path = NODE_SHARED / empty.relative_to(SHARED)
    proc = launch(*hf_on_both_nodes(name, slow_wheelhouse, {"model-path": str(node_path)}), check=False)
    assert proc.returncode != 0
    assert (
        "hf/finetune refuses these arguments for 2 process(es) (2 node(s) x 1): "
        f"--model-path '{node_path}' has no config.json"
    ) in proc.stdout + proc.stderr
    assert nothing_submitted(name)


def complete_steps(ckpt: Path) -> list[Path]:
    """The checkpoints rank 0 marked complete (accelerate's save_state, then train_state.json)."""
    return [p for p in ckpt.glob("step-*") if (p / "train_state.json").is_file()]


def test_a_relaunch_after_a_lost_node_resumes_from_accelerates_checkpoint(slow_wheelhouse: Path) -> None:
    name = f"it-hf-resume-{os.getpid()}"
    long_run = {"init-config": "tiny", "steps": 2000}
    # Without requeueing (training_job_max_restarts=0) a lost node ends the job; test_lab_self_healing.py has
    # the requeue.
    common = ("-e", "training_job_checkpoint_every=5", "-e", "training_job_max_restarts=0")
    first = subprocess.Popen(  # the launch that loses a node
        [
            str(Path(".venv/bin/ansible-playbook").resolve()),
            "trainstack.cluster.launch_training",
            "-i",
            "inventories/local",
            *hf_on_both_nodes(name, slow_wheelhouse, long_run, *common),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=ansible_env(),
    )
    ckpt = SHARED / "trainstack" / "checkpoints" / name
    try:
        deadline = time.monotonic() + 600
        while not complete_steps(ckpt):
            assert time.monotonic() < deadline, "no checkpoint was written"
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
    proc = launch(*hf_on_both_nodes(name, slow_wheelhouse, again, *common))
    summary = json.loads((results_dir(proc.stdout) / "summary.json").read_text())
    assert summary["resumed_from_step"] >= 5 and summary["resumed_from_step"] % 5 == 0
    assert summary["steps_this_run"] == 5 and summary["fsdp"]
