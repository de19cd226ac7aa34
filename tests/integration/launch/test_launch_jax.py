"""launch_training on the lab with jax/llama: JAX processes on two Slurm nodes, started by torchrun and joined
by jax.distributed (gloo between the CPUs), the weights sharded over both (FSDP), pytorch/fsdp's metric lines
parsed into the results table; the test case's own rules refusing a mesh the job cannot hold before anything
is submitted; and orbax's checkpoints resuming a relaunch after a node was killed. Slow: the first launch
copies the slow wheelhouse and builds a virtualenv from it (jaxlib, orbax's dependencies).
"""

from __future__ import annotations

import json
import os
import re
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


def jax_on_both_nodes(name: str, wheelhouse: Path, *extra: str) -> list[str]:
    return slow_case_on_both_nodes("jax/llama", name, wheelhouse, *extra)


def test_jax_fsdp_on_two_nodes(slow_wheelhouse: Path) -> None:
    name = f"it-jax-{os.getpid()}"
    proc = launch(*jax_on_both_nodes(name, slow_wheelhouse))
    out = results_dir(proc.stdout)
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["testcase"], summary["world_size"], summary["nodes"]) == ("jax/llama", 2, 2)
    assert (summary["dp"], summary["fsdp"], summary["device"]) == (1, 2, "cpu")
    assert summary["final_loss"] < summary["first_loss"] - 0.5, summary["losses"]
    assert "test case      jax/llama (tiny), 2 node(s), world size 2, cpu" in proc.stdout
    assert "COMPLETED on ts-compute1,ts-compute2" in proc.stdout
    assert (out / "job.log").read_text().count("TRAINSTACK_METRIC") == summary["steps"]


def test_a_mesh_the_job_cannot_hold_submits_nothing(slow_wheelhouse: Path) -> None:
    name = f"it-jax-mesh-{os.getpid()}"
    proc = launch(
        *jax_on_both_nodes(name, slow_wheelhouse, "-e", '{"training_job_args": {"dp": 3}}'), check=False
    )
    assert proc.returncode != 0
    assert (
        "jax/llama refuses these arguments for 2 process(es) (2 node(s) x 1): "
        "--dp 3 x --fsdp 1 = 3 devices, but the job has 2 processes"
    ) in proc.stdout + proc.stderr
    assert nothing_submitted(name)


def complete_steps(ckpt: Path) -> list[Path]:
    """orbax's published steps (a step being written carries a temporary suffix)."""
    return [p for p in ckpt.glob("step_*") if re.fullmatch(r"step_\d{8}", p.name)]


def test_a_relaunch_after_a_lost_node_resumes_from_orbaxs_checkpoint(slow_wheelhouse: Path) -> None:
    name = f"it-jax-resume-{os.getpid()}"
    # Without requeueing (training_job_max_restarts=0) a lost node ends the job; test_lab_self_healing.py has
    # the requeue.
    common = jax_on_both_nodes(
        name, slow_wheelhouse, "-e", "training_job_checkpoint_every=5", "-e", "training_job_max_restarts=0"
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
        deadline = time.monotonic() + 600
        while not complete_steps(ckpt):
            assert time.monotonic() < deadline, "no checkpoint was written"
            assert first.poll() is None, first.communicate()[0][-3000:]
            time.sleep(2)
        subprocess.run(["lxc-stop", "-k", "-n", "ts-compute2"], check=True)
        out = first.communicate(timeout=600)[0]
    finally:
        subprocess.run(["lxc-start", "-n", "ts-compute2", "-d"], check=False)
    assert first.returncode != 0
    assert re.search(r"jax/llama job \d+ ended (NODE_FAIL|FAILED)", out), out[-3000:]

    deadline = time.monotonic() + 180
    while on_lab_node("sinfo --noheader --Node --nodes=ts-compute2 --format=%T", check=False) != "idle":
        assert time.monotonic() < deadline, "ts-compute2 did not come back idle"
        time.sleep(3)
    proc = launch(*common, "-e", '{"training_job_args": {"steps": 2000, "max-steps-this-run": 5}}')
    summary = json.loads((results_dir(proc.stdout) / "summary.json").read_text())
    assert summary["resumed_from_step"] >= 5 and summary["resumed_from_step"] % 5 == 0
    assert summary["steps_this_run"] == 5
