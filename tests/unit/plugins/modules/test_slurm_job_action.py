"""The slurm_job action plugin: progress lines while it waits, and the task's own timeout in the failure.

Runs ansible-playbook on localhost (local connection), so the plugin and the module run as they do for users;
the Slurm commands replay Slurm 22.05 recordings (conftest.FakeSlurm).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from tests.support import VENV_BIN, ansible_env, run
from tests.unit.plugins.modules.conftest import FakeSlurm, answer

RUNNING = answer("squeue-running.txt")


def _play(tmp_path: Path, slurm: FakeSlurm, **args: object) -> tuple[int, str]:
    task = {"name": "fsdp-tiny", "script": "/tmp/job.sbatch", "wait": True, "poll_interval": 1, **args}
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [{"name": "Follow", "trainstack.cluster.slurm_job": task, "register": "job"}],
        }
    ]
    path = tmp_path / "play.yml"
    path.write_text(json.dumps(play))  # JSON is YAML
    env = ansible_env(PATH=f"{slurm.root}:{VENV_BIN}:{os.environ.get('PATH', '')}")
    proc = run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            str(path),
        ],
        check=False,
        env=env,
        timeout=120,
    )
    return proc.returncode, proc.stdout + proc.stderr


def _submits_job_12(slurm: FakeSlurm) -> None:
    slurm.on("squeue", {"out": ""}, match=("--name",))
    slurm.on("sbatch", {"out": "12\n"})
    slurm.on("sacct", answer("sacct-disabled.err"))
    slurm.on("squeue", answer("squeue-unknown.err"), match=("--json",))


def test_progress_lines_while_following_to_the_end(tmp_path, slurm) -> None:
    _submits_job_12(slurm)
    slurm.on("squeue", *[RUNNING] * 4, answer("squeue-failed.txt"))
    slurm.on("scontrol", answer("scontrol-failed.txt"))
    rc, out = _play(tmp_path, slurm, timeout=60, progress_interval=1)
    assert rc == 0, out[-3000:]
    progress = re.findall(
        r"^localhost: job 12 \(fsdp-tiny\): (\w+), elapsed (\S+)(?: on (\S+))? \[waited", out, re.M
    )
    assert len(progress) >= 2, out[-3000:]
    assert ("RUNNING", "0:00:02", "vm") in progress
    assert "FAILED - RETRYING" not in out
    assert re.search(r"^changed: \[localhost\]", out, re.M), out[-3000:]
    # Followed by id after the one submission.
    assert sum(c[0] == "sbatch" for c in slurm.calls) == 1
    assert all(c[c.index("--job") + 1] == "12" for c in slurm.calls if c[0] == "squeue" and "--job" in c)


def test_the_tasks_timeout_fails_with_the_id_state_and_cancel_hint(tmp_path, slurm) -> None:
    _submits_job_12(slurm)
    slurm.on("squeue", RUNNING)
    rc, out = _play(tmp_path, slurm, timeout=8, progress_interval=1)
    assert rc != 0
    # One-second module runs timed out on the way; the failure speaks of the task's 8 s, not of theirs.
    assert len(re.findall(r"^localhost: job 12 \(fsdp-tiny\): RUNNING", out, re.M)) >= 2, out[-3000:]
    error = next(line for line in out.splitlines() if line.startswith("[ERROR]"))
    assert (
        "job 12 (fsdp-tiny) is still running (RUNNING, elapsed 0:00:02 on vm) after the 8 s timeout" in error
    )
    assert "Cancel it with `scancel 12`" in error
    assert "trainstack.cluster.slurm_job job_id=12 state=query wait=true" in error
    assert "FAILED - RETRYING" not in out
    assert not any(c[0] == "scancel" for c in slurm.calls)
