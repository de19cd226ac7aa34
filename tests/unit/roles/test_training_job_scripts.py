"""Values reach the training process literally: training_job's local launch script and Slurm batch script are
rendered from the role's templates and run by bash, and the PyTorchJob manifest is parsed and expanded as
Kubernetes does. Each value holds spaces, quotes, a command substitution and a variable reference.

The interpreter the scripts start is a recorder (it writes the argv and environment it was started with), at a
path with a space in it, standing where torchrun runs; the worker's command line is then made from it with
torchrun's own substitution (torch.distributed.elastic's macros, run in a separate process). The batch script
runs with named stand-ins for `srun` and `scontrol` (no Slurm here): `srun` drops its own options and runs
the rest, as on one node.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from tests.support import REPO

from .test_training_job_inputs import role_vars

TEMPLATES = REPO / "roles" / "training_job" / "templates"

RECORDER = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["TS_RECORD"], "w") as handle:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, handle)
"""
SRUN_STANDIN = """#!/bin/bash
# STAND-IN for Slurm's srun on one node: skips srun's own --options and runs the command.
while [[ ${1:-} == --* ]]; do shift; done
exec "$@"
"""
SCONTROL_STANDIN = """#!/bin/bash
# STAND-IN for `scontrol show hostnames`: the one node of the allocation.
echo node1
"""


def odd(tmp_path: Path) -> str:
    """A value a shell, YAML or Kubernetes would change if it were not quoted and escaped (a shell would also
    create tmp_path/pwned)."""
    return (
        f"a  b \"dq\" 's' $(touch {tmp_path}/pwned) `touch {tmp_path}/pwned` $HOME ${{PATH}} $(HOME) $$ "
        "${local_rank} key: v #c ; | & * \\ end"
    )


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def render(template: str, tmp_path: Path, **overrides: Any) -> str:
    variables = role_vars(**overrides)
    variables |= {"ansible_managed": "managed by test", "__training_job_run_id": "run-1"}
    variables["__training_job_plan"]["python"] = str(executable(tmp_path / "bin dir" / "python", RECORDER))
    templar = Templar(loader=DataLoader(), variables=variables)
    return templar.template(trust_as_template((TEMPLATES / template).read_text()))


def request(tmp_path: Path) -> dict[str, Any]:
    value = odd(tmp_path)
    return {
        "training_job_env": {"TS_ODD": value, "TS_EMPTY": "", "TS_NUMBER": 7},
        "training_job_args": {"data": value, "steps": 3, "seq-len": None},
        "training_job_shared_dir": str(tmp_path / "shared dir"),
        "training_job_checkpoint_every": 5,
    }


def run_script(script: Path, tmp_path: Path, **env: str) -> dict[str, Any]:
    record = tmp_path / "record.json"
    environment = {**os.environ, "TS_RECORD": str(record), **env}
    proc = subprocess.run(["bash", str(script)], env=environment, capture_output=True, text=True, check=False)
    log = script.parent / "job.log"
    assert proc.returncode == 0, proc.stderr + (log.read_text() if log.exists() else "")
    return json.loads(record.read_text())


def torchrun_worker_argv(words: list[str]) -> list[str]:
    """The worker's command line torchrun makes of the words after its own options (its local_rank macro)."""
    code = (
        "import json, sys\n"
        "from torch.distributed.elastic.utils.api import macros\n"
        "print(json.dumps(macros.substitute(json.loads(sys.argv[1]), '0')))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(words)], capture_output=True, text=True, check=True
    )
    return json.loads(proc.stdout)


def check_literal(seen: dict[str, Any], tmp_path: Path, launcher: list[str]) -> None:
    value = odd(tmp_path)
    shared = tmp_path / "shared dir" / "trainstack"
    assert seen["env"]["TS_ODD"] == value
    assert seen["env"]["TS_EMPTY"] == ""
    assert seen["env"]["TS_NUMBER"] == "7"
    assert seen["env"]["PYTHONUNBUFFERED"] == "1"
    argv = seen["argv"]
    assert argv[: len(launcher)] == launcher
    entry = argv.index(f"{shared}/testcases/pytorch/fsdp/train.py")
    tail = torchrun_worker_argv(argv[entry + 1 :])
    summary = tail[-1]
    assert tail == [
        "--batch-size",
        "8",
        "--config",
        "tiny",
        "--data",
        value,
        "--steps",
        "3",
        "--checkpoint-dir",
        f"{shared}/checkpoints/pytorch-fsdp-1n",
        "--checkpoint-every",
        "5",
        "--summary-json",
        summary,
    ]
    assert "--seq-len" not in argv
    assert not (tmp_path / "pwned").exists()


def test_local_script_passes_values_literally(tmp_path: Path) -> None:
    script = tmp_path / "run" / "run.sh"
    script.parent.mkdir()
    script.write_text(render("run-local.sh.j2", tmp_path, **request(tmp_path)))
    seen = run_script(script, tmp_path)
    check_literal(
        seen, tmp_path, ["-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc-per-node=1"]
    )


def run_batch_script(script: Path, tmp_path: Path) -> dict[str, Any]:
    """Run a rendered job.sbatch as Slurm would start it on one node, with srun and scontrol stand-ins."""
    executable(tmp_path / "slurm" / "srun", SRUN_STANDIN)
    executable(tmp_path / "slurm" / "scontrol", SCONTROL_STANDIN)
    return run_script(
        script,
        tmp_path,
        PATH=f"{tmp_path / 'slurm'}:{os.environ['PATH']}",
        SLURM_JOB_ID="42",
        SLURM_JOB_NODELIST="node1",
        SLURM_JOB_NUM_NODES="1",
    )


def test_batch_script_passes_values_literally(tmp_path: Path) -> None:
    script = tmp_path / "run" / "job.sbatch"
    script.parent.mkdir()
    script.write_text(render("job.sbatch.j2", tmp_path, **request(tmp_path)))
    seen = run_batch_script(script, tmp_path)
    check_literal(seen, tmp_path, ["-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=1"])
    assert "--rdzv-endpoint=node1:29500" in seen["argv"]


def test_batch_script_asks_slurm_for_the_named_nodes(tmp_path: Path) -> None:
    any_nodes = render("job.sbatch.j2", tmp_path, **request(tmp_path), training_job_nodes=2)
    named = render(
        "job.sbatch.j2",
        tmp_path,
        **request(tmp_path),
        training_job_nodes=2,
        training_job_nodelist=["c1", "c2"],
    )
    assert "--nodelist" not in any_nodes
    assert "#SBATCH --nodes=2\n#SBATCH --nodelist=c1,c2\n" in named


def kubernetes_expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of a container's command and env values: $(NAME) becomes the variable when it
    is defined (else stays), $$ becomes $, any other $ stays."""

    def one(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "$$":
            return "$"
        return env.get(token[2:-1], token)

    return re.sub(r"\$\$|\$\([^)]*\)", one, text)


@pytest.fixture
def manifest(tmp_path: Path) -> dict[str, Any]:
    text = render(
        "pytorchjob.yaml.j2",
        tmp_path,
        **request(tmp_path),
        training_job_launcher="kubernetes",
        training_job_k8s_image="registry.example/fsdp:1",
        training_job_nodes=2,
    )
    return yaml.safe_load(text)


def test_pytorchjob_passes_values_literally(manifest: dict[str, Any], tmp_path: Path) -> None:
    value = odd(tmp_path)
    pod_env = {"MASTER_ADDR": "master-0", "MASTER_PORT": "23456", "HOME": "/root", "PATH": "/usr/bin"}
    for role in ("Master", "Worker"):
        (container,) = manifest["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["containers"]
        env = {item["name"]: kubernetes_expand(item["value"], pod_env) for item in container["env"]}
        assert env["TS_ODD"] == value
        assert env["TS_NUMBER"] == "7"
        command = [kubernetes_expand(word, {**pod_env, **env}) for word in container["command"]]
        entry = next(i for i, word in enumerate(command) if word.endswith("/train.py"))
        command = command[: entry + 1] + torchrun_worker_argv(command[entry + 1 :])
        assert f"--data={value}" in command
        assert "--rdzv-endpoint=master-0:23456" in command
        assert "--steps=3" in command and not any(word.startswith("--seq-len") for word in command)
