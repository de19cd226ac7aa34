"""slurm_job on the lab's Slurm 22.05: follow a job without accounting, and a wait that times out.

Each test runs a two-task playbook on the head node (write a batch script, then slurm_job with wait=true) and
reads the registered result back as JSON. Seconds, not minutes: the jobs sleep 2 s, the timeout is 4 s.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import VENV_BIN, on_lab_node, run

pytestmark = pytest.mark.lab

SLURM_CONF = "/etc/slurm/slurm.conf"
SAVED_CONF = "/etc/slurm/slurm.conf.with-accounting"


def _wait(command: str, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while on_lab_node(command, check=False) != "ok":
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(1)


def _restart_slurmctld() -> None:
    on_lab_node("systemctl restart slurmctld")
    _wait("sinfo --noheader >/dev/null 2>&1 && echo ok", "slurmctld to answer")


@pytest.fixture
def no_accounting(slurm_lab: None) -> Iterator[None]:
    """The head node's slurmctld without accounting (ParallelCluster's default), restored afterwards.

    Only the controller's slurm.conf changes (AccountingStorageType=accounting_storage/none, the storage host
    lines dropped); sacct reads the same file on the head node and so reports accounting as disabled.
    """
    on_lab_node(f"cp -p {SLURM_CONF} {SAVED_CONF}")
    try:
        on_lab_node(
            f"sed -i -e '/^AccountingStorage/d' {SLURM_CONF} && "
            f"echo AccountingStorageType=accounting_storage/none >> {SLURM_CONF}"
        )
        _restart_slurmctld()
        assert "accounting storage is disabled" in on_lab_node("sacct -n -X 2>&1", check=False)
        yield
    finally:
        on_lab_node(f"mv {SAVED_CONF} {SLURM_CONF}")
        _restart_slurmctld()
        _wait("sacct -n -X >/dev/null 2>&1 && echo ok", "accounting to answer again")


def _follow(tmp_path: Path, name: str, body: str, **args: object) -> tuple[int, str, dict]:
    """Run slurm_job (submit, wait) on the head node: ansible-playbook's rc, its output, the result."""
    script = f"/tmp/{name}.sbatch"
    result = tmp_path / "result.json"
    play = [
        {
            "hosts": "head",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Write the batch script",
                    "ansible.builtin.copy": {
                        "dest": script,
                        "mode": "0755",
                        "content": f"#!/bin/sh\n{body}\n",
                    },
                },
                {
                    "name": "Submit and follow",
                    "trainstack.cluster.slurm_job": {"name": name, "script": script, "chdir": "/tmp", **args},
                    "register": "job",
                    "ignore_errors": True,
                },
                {
                    "name": "Keep the result",
                    "ansible.builtin.copy": {
                        "dest": str(result),
                        "content": "{{ job | to_json }}",
                        "mode": "0644",
                    },
                    "delegate_to": "localhost",
                },
            ],
        }
    ]
    path = tmp_path / "play.yml"
    path.write_text(json.dumps(play))  # JSON is YAML
    proc = run(
        [str(VENV_BIN / "ansible-playbook"), "-i", "inventories/local", str(path)], check=False, timeout=300
    )
    out = proc.stdout + proc.stderr
    assert result.exists(), out[-3000:]
    return proc.returncode, out, json.loads(result.read_text())


def test_follows_a_job_to_its_end_through_scontrol_without_accounting(no_accounting: None, tmp_path) -> None:
    name = f"follow-noacct-{os.getpid()}"
    rc, out, job = _follow(
        tmp_path, name, "sleep 2; exit 3", wait=True, timeout=120, progress_interval=1, poll_interval=1
    )
    assert rc == 0, out[-3000:]
    assert not job.get("failed"), job
    assert (job["state"], job["exit_code"], job["source"], job["terminal"]) == ("FAILED", 3, "scontrol", True)
    assert job["submitted"] and re.fullmatch(r"\d+", job["job_id"])
    assert job["nodes"] and job["nodes"][0].startswith("ts-")
    assert re.search(rf"^ts-head: job {job['job_id']} \({name}\): (PENDING|RUNNING), elapsed", out, re.M), out
    assert "FAILED - RETRYING" not in out


def test_timeout_names_the_job_its_state_and_how_to_cancel(slurm_lab: None, tmp_path) -> None:
    name = f"follow-timeout-{os.getpid()}"
    job_id = ""
    try:
        rc, out, job = _follow(tmp_path, name, "sleep 120", wait=True, timeout=4, progress_interval=2)
        job_id = job["job_id"]
        assert rc == 0, out[-3000:]  # ignore_errors: the play goes on to keep the result
        assert job["failed"] and job["timed_out"], job
        assert job["state"] in ("PENDING", "RUNNING")
        assert job["msg"].startswith(f"job {job_id} ({name}) is still {job['state'].lower()} ({job['state']}")
        assert "after the 4 s timeout" in job["msg"]
        assert f"Cancel it with `scancel {job_id}`" in job["msg"]
        assert f"trainstack.cluster.slurm_job job_id={job_id} state=query wait=true" in job["msg"]
        # Left alone by the module: still queued until the test cancels it.
        assert on_lab_node(f"squeue --noheader --job {job_id} --format=%T") in ("PENDING", "RUNNING")
    finally:
        if job_id:
            on_lab_node(f"scancel {job_id}", check=False)
        else:
            on_lab_node(f"scancel --name {name}", check=False)
