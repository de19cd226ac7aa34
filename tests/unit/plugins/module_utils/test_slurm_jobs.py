"""Parsing of squeue/sacct/sbatch output, which decides whether slurm_job submits, waits or fails."""

from __future__ import annotations

import pytest

from plugins.module_utils.slurm_jobs import expand_hostlist, parse_sacct, parse_sbatch, parse_squeue


@pytest.mark.parametrize(
    ("hostlist", "hosts"),
    [
        ("ts-compute[1-2]", ["ts-compute1", "ts-compute2"]),
        ("gpu-[008-010],head", ["gpu-008", "gpu-009", "gpu-010", "head"]),
        ("queue1-st-p5-[1,3-4]", ["queue1-st-p5-1", "queue1-st-p5-3", "queue1-st-p5-4"]),
        ("node7", ["node7"]),
        ("", []),
        ("None assigned", []),
    ],
)
def test_expand_hostlist(hostlist: str, hosts: list[str]) -> None:
    assert expand_hostlist(hostlist) == hosts


def test_parse_squeue_running_and_pending() -> None:
    out = (
        "42|fsdp-2n|RUNNING|ts-compute[1-2]|1-02:03:04|None|/shared/trainstack/runs/a\n"
        "43|fsdp-2n|PENDING||0:00|Resources|/shared/trainstack/runs/b\n"
    )
    running, pending = parse_squeue(out)
    assert (running.job_id, running.state, running.nodes) == ("42", "RUNNING", ["ts-compute1", "ts-compute2"])
    assert running.elapsed_s == ((24 + 2) * 60 + 3) * 60 + 4
    assert running.active and not running.terminal
    assert (pending.state, pending.reason, pending.nodes, pending.work_dir) == (
        "PENDING",
        "Resources",
        [],
        "/shared/trainstack/runs/b",
    )


def test_parse_sacct_takes_the_allocation_line() -> None:
    out = (
        "42|fsdp-2n|NODE_FAIL|1:0|ts-compute[1-2]|2|37|/shared/run\n"
        "42.batch|batch|CANCELLED|0:15|ts-compute1|1|37|\n"
    )
    info = parse_sacct(out)
    assert info is not None
    assert (info.state, info.exit_code, info.signal, info.node_count, info.elapsed_s) == (
        "NODE_FAIL",
        1,
        0,
        2,
        37,
    )
    assert info.terminal and not info.active


def test_parse_sacct_cancelled_by_user() -> None:
    info = parse_sacct("7|x|CANCELLED by 0|0:0|None assigned|0|0|/tmp\n")
    assert info is not None
    assert (info.state, info.nodes) == ("CANCELLED", [])


def test_parse_sacct_empty() -> None:
    assert parse_sacct("") is None


@pytest.mark.parametrize(("out", "job_id"), [("123\n", "123"), ("124;cluster-a\n", "124")])
def test_parse_sbatch(out: str, job_id: str) -> None:
    assert parse_sbatch(out) == job_id


def test_parse_sbatch_rejects_an_error() -> None:
    with pytest.raises(ValueError, match="did not return a job id"):
        parse_sbatch("sbatch: error: Batch job submission failed: Invalid partition name specified")
