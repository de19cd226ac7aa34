"""Verifier for roles/training_job: the tiny job ran through Slurm on the nodes asked for, once, and the
results the role brought back are the job's own and make sense."""

import json
import math
import os
import re
from pathlib import Path

import pytest
import yaml

SCENARIO = Path(__file__).resolve().parents[1]
INVENTORY = yaml.safe_load((SCENARIO / "molecule.yml").read_text())["provisioner"]["inventory"]
CONFIG = INVENTORY["group_vars"]["all"]
NAME = CONFIG["training_job_name"]
NODES = CONFIG["training_job_nodelist"]
STEPS = CONFIG["training_job_args"]["steps"]
ROOT = f"{CONFIG['training_job_shared_dir']}/trainstack"
RESULTS = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent")) / "results"
METRIC = "TRAINSTACK_METRIC "


@pytest.fixture
def head(host):
    if host.backend.get_hostname() != "ts-m-tj-head":
        pytest.skip("runs on the controller")
    return host


@pytest.fixture
def job(head) -> dict[str, str]:
    """The one allocation of the scenario's job name that Slurm accounted."""
    fields = "JobID,State,ExitCode,NNodes,NodeList"
    out = head.check_output(
        f"sacct --noheader --parsable2 -X --name {NAME} --starttime 2000-01-01 --format {fields}"
    )
    rows = [dict(zip(fields.split(","), line.split("|"), strict=True)) for line in out.splitlines()]
    assert len(rows) == 1, f"expected one job named {NAME}, sacct has {rows}"
    return rows[0]


@pytest.fixture
def collected() -> Path:
    """The results directory the role fetched to the controller (one launch, so one)."""
    runs = sorted(p for p in RESULTS.iterdir() if p.is_dir())
    assert [p.name for p in runs] == [p.name for p in runs if p.name.startswith(f"{NAME}-")]
    assert len(runs) == 1, runs
    return runs[0]


def test_job_completed_once_on_both_compute_nodes(head, job):
    assert (job["State"], job["ExitCode"], job["NNodes"]) == ("COMPLETED", "0:0", "2")
    expanded = head.check_output(f"scontrol show hostnames {job['NodeList']}").split()
    assert sorted(expanded) == sorted(NODES)


def test_training_step_ran_on_every_node(head, job):
    # The batch script's srun: torchrun on each node, one task per node, all completed.
    out = head.check_output(
        f"sacct --noheader --parsable2 -j {job['JobID']} --format JobID,JobName,State,NNodes,NTasks"
    )
    steps = [line.split("|") for line in out.splitlines() if re.match(rf"{job['JobID']}\.\d+\|", line)]
    assert [(s[2], s[3], s[4]) for s in steps] == [("COMPLETED", "2", "2")], out


def test_collected_results_are_the_jobs(head, job, collected):
    run_dir = f"{ROOT}/runs/{collected.name}"
    for name in ("job.log", "summary.json"):
        assert (collected / name).read_text() == head.file(f"{run_dir}/{name}").content_string
    log = (collected / "job.log").read_text()
    banner = rf"^trainstack: job {job['JobID']} on {re.escape(job['NodeList'])},"
    assert re.search(banner, log, re.M), log[:2000]


def test_summary_is_sane(collected):
    summary = json.loads((collected / "summary.json").read_text())
    assert summary["testcase"] == "pytorch/ddp"
    assert (summary["world_size"], summary["nodes"], summary["device"]) == (2, 2, "cpu")
    assert summary["steps"] == STEPS
    assert summary["resumed_from_step"] == 0
    losses = summary["losses"]
    assert len(losses) == STEPS
    assert all(math.isfinite(x) and x > 0 for x in losses)
    assert (summary["first_loss"], summary["final_loss"]) == (losses[0], losses[-1])
    # A learnable sequence: 30 steps of AdamW take the loss well down from where it starts.
    assert summary["final_loss"] < 0.9 * summary["first_loss"]
    assert summary["tokens_per_s"] > 0


def test_log_metrics_match_the_summary(collected):
    summary = json.loads((collected / "summary.json").read_text())
    records = [
        json.loads(line[len(METRIC) :])
        for line in (collected / "job.log").read_text().splitlines()
        if line.startswith(METRIC)
    ]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert [r["loss"] for r in records] == pytest.approx(summary["losses"])


def test_staged_once_and_reused(head, collected):
    # One payload, one locked virtualenv (with torch from the wheelhouse), one run directory on the shared
    # filesystem: the second converge added nothing.
    payload = head.check_output(f"ls -A {ROOT}/testcases/pytorch/ddp").split()
    assert len([f for f in payload if f.startswith(".staged-")]) == 1
    venvs = head.check_output(f"ls {ROOT}/venvs").split()
    assert len(venvs) == 1 and venvs[0].startswith("pytorch-ddp-")
    assert head.file(f"{ROOT}/venvs/{venvs[0]}/.complete").exists
    python = f"{ROOT}/venvs/{venvs[0]}/bin/python"
    assert head.check_output(f"{python} -c 'import torch; print(torch.__version__)'") == "2.13.0+cpu"
    assert head.check_output(f"ls {ROOT}/runs").split() == [collected.name]


def test_a_queued_job_of_the_name_is_adopted(head):
    """What the role promises a re-run while its job is still queued: its submit step (the module
    trainstack.cluster.slurm_job) adopts that job instead of submitting a second. A held job stays queued."""
    name = f"{NAME}-queued"
    head.check_output(f"printf '#!/bin/sh\\ntrue\\n' > /tmp/{name}.sbatch")
    held = head.check_output(f"sbatch --parsable --hold --job-name {name} /tmp/{name}.sbatch").strip()
    try:
        result = head.ansible(
            "trainstack.cluster.slurm_job", f"name={name} script=/tmp/{name}.sbatch chdir=/tmp", check=False
        )
        assert (result["submitted"], result["changed"], result["job_id"]) == (False, False, held), result
    finally:
        head.run(f"scancel --name {name}")
