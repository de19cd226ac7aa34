"""A Slurm launch resumes by itself: the batch script is requeueable, records each attempt in the one log, and
refuses an attempt past training_job_max_restarts with the reason. The script runs with the srun and scontrol
stand-ins of test_training_job_scripts (no Slurm here); Slurm sets SLURM_RESTART_COUNT on a requeue."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ansible_collections.trainstack.cluster.plugins.module_utils.launch import output

from .test_training_job_scripts import SCONTROL_STANDIN, SRUN_STANDIN, executable, render, request


def _script(tmp_path: Path, **overrides: object) -> Path:
    script = tmp_path / "run" / "job.sbatch"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(render("job.sbatch.j2", tmp_path, **request(tmp_path), **overrides))
    return script


def _run(script: Path, tmp_path: Path, restarts: int) -> subprocess.CompletedProcess:
    executable(tmp_path / "slurm" / "srun", SRUN_STANDIN)
    executable(tmp_path / "slurm" / "scontrol", SCONTROL_STANDIN)
    env = {
        **os.environ,
        "TS_RECORD": str(tmp_path / "record.json"),
        "PATH": f"{tmp_path / 'slurm'}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NODELIST": "node1",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_RESTART_COUNT": str(restarts),
    }
    return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=False)


def test_the_job_is_requeueable_and_keeps_every_attempt_in_its_log(tmp_path: Path) -> None:
    text = _script(tmp_path).read_text()
    assert "#SBATCH --requeue\n" in text and "#SBATCH --open-mode=append\n" in text
    assert "--no-requeue" not in text
    never = _script(tmp_path / "never", training_job_max_restarts=0).read_text()
    assert "#SBATCH --no-requeue\n" in never and "TRAINSTACK_ATTEMPT" not in never


def test_an_attempt_names_its_nodes_and_the_checkpoint_it_resumes_from(tmp_path: Path) -> None:
    script = _script(tmp_path)
    checkpoints = tmp_path / "shared dir" / "trainstack" / "checkpoints" / "pytorch-fsdp-1n"
    for step in ("step-00000005", "step-00000010"):
        (checkpoints / step).mkdir(parents=True)
        (checkpoints / step / "train_state.json").write_text("{}")
    (checkpoints / "step-00000015").mkdir()  # no train_state.json: an interrupted save, not resumed from
    proc = _run(script, tmp_path, restarts=1)
    assert proc.returncode == 0, proc.stderr
    attempts = output.job_attempts(proc.stdout)
    assert [(a["attempt"], a["nodes"], a["checkpoint"]) for a in attempts] == [
        (1, "node1", str(checkpoints / "step-00000010"))
    ]
    assert (tmp_path / "record.json").exists()


def test_an_attempt_past_the_limit_stops_with_the_reason_and_runs_nothing(tmp_path: Path) -> None:
    script = _script(tmp_path, training_job_max_restarts=1)
    proc = _run(script, tmp_path, restarts=2)
    assert proc.returncode == 3
    attempts = output.job_attempts(proc.stdout)
    assert attempts[-1]["stopped"] == "requeued 2 times, more than training_job_max_restarts=1: not run again"
    assert not (tmp_path / "record.json").exists()


def test_torchrun_restarts_a_dead_rank_when_asked(tmp_path: Path) -> None:
    assert "--max-restarts" not in _script(tmp_path).read_text()
    assert "--max-restarts=2 \\\n" in _script(tmp_path / "r", training_job_rank_restarts=2).read_text()
