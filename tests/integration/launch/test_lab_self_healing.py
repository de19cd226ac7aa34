"""Elastic lab nodes that heal: a GPU fault drains a node, Slurm powers it down, a new node comes from the
image, and the requeued job resumes from its checkpoint on it, as on ParallelCluster's dynamic nodes.

The lab is brought up with two elastic nodes (lab_elastic_nodes=2): Slurm CLOUD nodes of partition `elastic`,
made by the host's power program when Slurm resumes them and removed when it suspends them. The fault is the
lab's GPU fault injection (a file the gpu_xid check reads as kernel-log lines); slurmd's health check drains
the node naming the check and powers it down. Slow: every replacement makes and configures a node from the
image. At the end the lab is brought back to its static nodes, as the other lab tests expect it.

A container shares its host's kernel, so /proc/sys/kernel/random/boot_id is the host's: a new node is told
from the old one by its machine id (the image carries none; each container makes its own).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO, ansible_env, lab_ssh, on_lab_node, playbook, wait_for

from .conftest import SHARED, launch, results_dir

pytestmark = [pytest.mark.lab, pytest.mark.slow]

NODES = ("ts-elastic1", "ts-elastic2")
ADDRESS = {"ts-elastic1": "10.77.0.51", "ts-elastic2": "10.77.0.52"}
FAULT = "/run/trainstack/lab-fault-gpu"
XID_79 = "NVRM: Xid (PCI:0000:00:1e): 79, pid=0, GPU has fallen off the bus."
# The resume time goes to the ignored results/ directory, so that a test run leaves the tree as it was; a run
# on the reference host is published with TRAINSTACK_BENCH_RESULTS=bench/results (docs/lab.md).
BENCH_NAME = "lab_elastic_resume.json"


@pytest.fixture(scope="module")
def elastic_lab(lab_ready: None) -> Iterator[None]:
    """The lab with two elastic nodes and Slurm configured for them; afterwards the lab as it was."""
    playbook("lab_up", "-e", "lab_node_count=3", "-e", "lab_elastic_nodes=2", timeout=1200)
    playbook("slurm_cluster", "-i", "inventories/local", timeout=1800)
    yield
    on_lab_node("scancel --partition=elastic; true", check=False)
    playbook("lab_up", "-e", "lab_node_count=3", timeout=1200)
    playbook("slurm_cluster", "-i", "inventories/local", timeout=1800)


def _node_state(node: str) -> str:
    return on_lab_node(f"sinfo --noheader --Node --nodes={node} --format=%T", check=False).split("\n")[0]


def _job_state(name: str, launch_proc: subprocess.Popen) -> str:
    assert launch_proc.poll() is None, launch_proc.communicate()[0][-3000:]
    return on_lab_node(f"squeue -h -n {name} -o %T", check=False)


def _container_running(node: str) -> bool:
    info = subprocess.run(["lxc-info", "-n", node, "-sH"], capture_output=True, text=True, check=False)
    return info.stdout.strip() == "RUNNING"


def _identity(node: str) -> str:
    """The node's machine id: the image carries none, so a node made anew from it has a new one."""
    proc = lab_ssh(ADDRESS[node], "cat /etc/machine-id")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def _power_down(*nodes: str) -> None:
    on_lab_node(f"scontrol update nodename={','.join(nodes)} state=power_down_force reason=test", check=False)
    for node in nodes:
        wait_for(
            lambda n=node: _node_state(n) == "idle~" and not _container_running(n),
            240,
            f"{node} powered down",
        )


def _inject_fault(node: str) -> None:
    proc = lab_ssh(ADDRESS[node], f"mkdir -p /run/trainstack && echo '{XID_79}' > {FAULT}")
    assert proc.returncode == 0, proc.stderr


def _drain_reasons(node: str) -> list[str]:
    """The reasons Slurm's accounting recorded for the node's drains (its state went with the node)."""
    out = on_lab_node(
        f"sacctmgr -nP list event nodes={node} format=state,reason start=now-2hours", check=False
    )
    return [line.split("|", 1)[1] for line in out.splitlines() if line.startswith("DRAIN")]


def test_a_powered_down_node_comes_back_from_the_image_when_a_job_needs_it(elastic_lab: None) -> None:
    _power_down(*NODES)
    submitted = time.monotonic()
    job = on_lab_node(
        "sbatch --parsable -p elastic -N2 --wrap 'srun cat /etc/machine-id' -o /shared/elastic-%j.log"
    )
    wait_for(
        lambda: on_lab_node(f"squeue -h -j {job} -o %T", check=False) in ("RUNNING", "COMPLETING", ""),
        900,
        "job running",
    )
    to_running = time.monotonic() - submitted
    wait_for(lambda: on_lab_node(f"squeue -h -j {job} -o %T", check=False) == "", 120, "job done")
    state = on_lab_node(f"sacct -nX -j {job} -o State --parsable2")
    assert state == "COMPLETED"
    assert all(_container_running(node) for node in NODES)
    bench = REPO / os.environ.get("TRAINSTACK_BENCH_RESULTS", "results") / BENCH_NAME
    bench.parent.mkdir(parents=True, exist_ok=True)
    bench.write_text(
        json.dumps(
            {
                "what": "lab elastic nodes: seconds from sbatch to RUNNING when both nodes were powered down "
                "(two containers made from the base image and configured: MUNGE, slurmd, node_health)",
                "nodes": len(NODES),
                "seconds_to_running": round(to_running, 1),
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "host_cpus": os.cpu_count(),
            },
            indent=2,
        )
        + "\n"
    )


def _fsdp(name: str, partition: str, *extra: str) -> list[str]:
    return [
        "-e", "training_job_testcase=pytorch/fsdp",
        "-e", "training_job_nodes=2",
        "-e", f"training_job_name={name}",
        "-e", f"training_job_partition={partition}",
        "-e", f"training_job_results_dir={SHARED.parent}/results",
        # A CPU step takes about 0.1 s here: enough steps that the job still trains when the fault is seen.
        "-e", "training_job_checkpoint_every=25",
        "-e", '{"training_job_args": {"steps": 1200}}',
        *extra,
    ]  # fmt: skip


def _start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [
            str(REPO / ".venv/bin/ansible-playbook"),
            "trainstack.cluster.launch_training",
            "-i",
            "inventories/local",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=ansible_env(),
        cwd=REPO,
    )


def _fault_after_checkpoint(name: str, launch_proc: subprocess.Popen, after_step: int = 5) -> str:
    """Wait for a checkpoint of ``name`` past ``after_step``, then inject the GPU fault on its last node."""
    ckpt = SHARED / "trainstack" / "checkpoints" / name

    def saved() -> bool:
        assert launch_proc.poll() is None, launch_proc.communicate()[0][-3000:]
        steps = [int(p.parent.name.split("-")[1]) for p in ckpt.glob("step-*/train_state.json")]
        return any(step > after_step for step in steps) if after_step else bool(steps)

    wait_for(saved, 900, f"a checkpoint of {name} past step {after_step}")
    nodes = on_lab_node(f"squeue -h -n {name} -o %N")
    victim = on_lab_node(f"scontrol show hostnames {nodes}").split()[-1]
    _inject_fault(victim)
    return victim


def test_a_failed_node_is_replaced_and_the_job_resumes_on_it(elastic_lab: None) -> None:
    reference = launch(*_fsdp(f"it-heal-ref-{os.getpid()}", "compute", "-e", "training_job_max_restarts=0"))
    whole = json.loads((results_dir(reference.stdout) / "summary.json").read_text())

    name = f"it-heal-{os.getpid()}"
    proc = _start(_fsdp(name, "elastic"))
    # The job runs once both nodes are made, configured and registered (their SSH is up by then).
    wait_for(lambda: _job_state(name, proc) == "RUNNING", 900, f"{name} running on the elastic nodes")
    before = {node: _identity(node) for node in NODES}
    victim = _fault_after_checkpoint(name, proc, after_step=0)
    wait_for(lambda: not _container_running(victim), 300, f"{victim} removed")
    out = proc.communicate(timeout=1800)[0]
    assert proc.returncode == 0, out[out.rfind("fatal:") :][:3000] if "fatal:" in out else out[-3000:]

    results = results_dir(out)
    summary = json.loads((results / "summary.json").read_text())
    attempts = json.loads((results / "attempts.json").read_text())
    assert [a["attempt"] for a in attempts] == [0, 1]
    assert attempts[0]["checkpoint"] is None and attempts[0]["steps"] > 0
    assert attempts[1]["checkpoint"] and summary["resumed_from_step"] == int(
        attempts[1]["checkpoint"].rsplit("-", 1)[1]
    )
    assert summary["resumed_from_step"] > 0
    assert summary["final_loss"] == whole["final_loss"]  # bit-identical to the run that lost no node
    assert re.search(r"attempt 1 +on ts-elastic", out)
    assert _identity(victim) != before[victim]  # a new container from the image, not the old one repaired
    assert any(reason.startswith("node_health: gpu_xid: Xid 79") for reason in _drain_reasons(victim))


def test_a_job_requeued_past_its_limit_stops_with_the_reason(elastic_lab: None) -> None:
    name = f"it-heal-limit-{os.getpid()}"
    proc = _start(
        _fsdp(
            name,
            "elastic",
            "-e",
            "training_job_max_restarts=1",
            "-e",
            '{"training_job_args": {"steps": 5000}}',
        )
    )
    _fault_after_checkpoint(name, proc, after_step=0)
    # The second attempt resumes on a new node; a fault on it makes a third, one past the limit.
    ckpt = SHARED / "trainstack" / "checkpoints" / name
    first = max(int(p.parent.name.split("-")[1]) for p in ckpt.glob("step-*/train_state.json"))
    wait_for(lambda: 'TRAINSTACK_ATTEMPT {"attempt": 1' in _job_log(name), 1200, "the second attempt")
    _fault_after_checkpoint(name, proc, after_step=first)
    out = proc.communicate(timeout=1800)[0]
    assert proc.returncode != 0
    assert "Stopped: requeued 2 times, more than training_job_max_restarts=1: not run again" in out, out[
        -4000:
    ]
    attempts = json.loads((results_dir_of_failure(out) / "attempts.json").read_text())
    assert [a["attempt"] for a in attempts] == [0, 1, 2]
    assert attempts[-1]["stopped"].startswith("requeued 2 times")


def _job_log(name: str) -> str:
    """The job's log (every attempt appended), read where the host sees the shared directory."""
    workdir = on_lab_node(f"squeue -h -n {name} -o %Z", check=False).strip()
    if not workdir.startswith("/shared/"):
        return ""
    log = SHARED / workdir.removeprefix("/shared/") / "job.log"
    return log.read_text(errors="replace") if log.exists() else ""


def results_dir_of_failure(output: str) -> Path:
    match = re.search(r"run directory (/[\w./-]+)", output)
    assert match, output[-3000:]
    return SHARED.parent / "results" / Path(match.group(1).rstrip(".,")).name
