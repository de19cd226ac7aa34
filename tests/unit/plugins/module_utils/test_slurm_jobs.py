"""Parsing of squeue/sacct/scontrol/sbatch output, which decides whether slurm_job submits, waits or fails.

The Slurm 22.05 recordings live with the module's tests (tests/unit/plugins/modules/fixtures/slurm-22.05).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from plugins.module_utils.slurm.slurm_jobs import (
    JobInfo,
    check_job_id,
    combine,
    expand_hostlist,
    parse_sacct,
    parse_sacct_json,
    parse_sbatch,
    parse_scontrol,
    parse_squeue,
    parse_squeue_json,
    progress_line,
    select_records,
    timeout_message,
)

RECORDED = Path(__file__).resolve().parents[1] / "modules" / "fixtures" / "slurm-22.05"


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


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
    [info] = parse_sacct(out)
    assert (info.state, info.exit_code, info.signal, info.node_count, info.elapsed_s) == (
        "NODE_FAIL",
        1,
        0,
        2,
        37,
    )
    assert info.terminal and not info.active


def test_parse_sacct_cancelled_by_user() -> None:
    [info] = parse_sacct("7|x|CANCELLED by 0|0:0|None assigned|0|0|/tmp\n")
    assert (info.state, info.nodes) == ("CANCELLED", [])


def test_parse_sacct_empty() -> None:
    assert parse_sacct("") == []


@pytest.mark.parametrize(("out", "job_id"), [("123\n", "123"), ("124;cluster-a\n", "124")])
def test_parse_sbatch(out: str, job_id: str) -> None:
    assert parse_sbatch(out) == job_id


def test_parse_sbatch_rejects_an_error() -> None:
    with pytest.raises(ValueError, match="did not return a job id"):
        parse_sbatch("sbatch: error: Batch job submission failed: Invalid partition name specified")


def test_parse_sacct_array_and_het_lines() -> None:
    out = (
        "13_1|arr|COMPLETED|0:0|vm|1|3|/tmp\n"
        "13_[2-3]|arr|PENDING|0:0|None assigned|0|0|/tmp\n"
        "16+1|het|FAILED|2:0|vm|1|4|/tmp\n"
    )
    assert [(r.job_id, r.state) for r in parse_sacct(out)] == [
        ("13_1", "COMPLETED"),
        ("13_[2-3]", "PENDING"),
        ("16+1", "FAILED"),
    ]


# ---------------------------------------------------------------- recorded Slurm 22.05 output


def test_parse_recorded_squeue_text() -> None:
    [running] = parse_squeue(recorded("squeue-running.txt"))
    assert (running.job_id, running.name, running.state, running.nodelist, running.elapsed_s) == (
        "12",
        "fsdp-tiny",
        "RUNNING",
        "vm",
        2,
    )
    assert [(r.job_id, r.state) for r in parse_squeue(recorded("squeue-array.txt"))] == [
        ("13_3", "PENDING"),
        ("13_2", "RUNNING"),
        ("13_1", "RUNNING"),
    ]
    assert [r.job_id for r in parse_squeue(recorded("squeue-het.txt"))] == ["16+0", "16+1"]
    [failed] = parse_squeue(recorded("squeue-failed.txt"))
    assert (failed.state, failed.reason, failed.exit_code) == ("FAILED", "NonZeroExitCode", None)


def test_parse_recorded_scontrol() -> None:
    [failed] = parse_scontrol(recorded("scontrol-failed.txt"))
    assert (failed.job_id, failed.state, failed.exit_code, failed.signal) == ("12", "FAILED", 3, 0)
    assert (failed.elapsed_s, failed.nodes, failed.node_count, failed.work_dir) == (
        5,
        ["vm"],
        1,
        "/tmp/slurmrec",
    )
    [pending] = parse_scontrol(recorded("scontrol-array-pending.txt"))
    assert (pending.job_id, pending.state, pending.nodes, pending.node_count) == (
        "11_[1-3]",
        "PENDING",
        [],
        0,
    )
    # An array task is printed under its own JobId (15) with ArrayJobId/ArrayTaskId: read as 13_2.
    assert [(r.job_id, r.state) for r in parse_scontrol(recorded("scontrol-array.txt"))] == [
        ("13_3", "PENDING"),
        ("13_2", "RUNNING"),
        ("13_1", "RUNNING"),
    ]
    assert [r.job_id for r in parse_scontrol(recorded("scontrol-het.txt"))] == ["16+0", "16+1"]
    assert parse_scontrol(recorded("scontrol-unknown.err")) == []


def test_parse_recorded_squeue_json() -> None:
    """22.05's squeue --json lists every job (it ignores --job); exit codes are raw wait statuses."""
    jobs = {r.job_id: r for r in parse_squeue_json(recorded("squeue-all-array.json"), now=1796120021)}
    assert (jobs["2"].state, jobs["2"].exit_code, jobs["2"].elapsed_s) == ("FAILED", 3, 3)
    assert (jobs["13_1"].state, jobs["13_1"].elapsed_s, jobs["13_1"].nodelist) == ("RUNNING", 2, "vm")
    assert (jobs["13_3"].state, jobs["13_3"].exit_code, jobs["13_3"].elapsed_s) == ("PENDING", None, 0)
    assert (jobs["11_[1-3]"].state, jobs["4+1"].state) == ("CANCELLED", "CANCELLED")
    het = parse_squeue_json(recorded("squeue-all-het.json"), now=1796120030)
    assert [r.job_id for r in het if r.job_id.startswith("16")] == ["16+0", "16+1"]


def test_parse_sacct_json_shapes() -> None:
    """Stand-in (no accounting where the recordings were made): 22.05's plain values, 23.02's wrapped ones."""
    plain = (
        '{"jobs": [{"job_id": 21, "name": "fsdp-tiny", "state": {"current": "FAILED", "reason": "None"},'
        ' "exit_code": {"status": "FAILED", "return_code": 3}, "nodes": "ts-compute[1-2]",'
        ' "allocation_nodes": 2,'
        ' "time": {"elapsed": 37}, "array": {"job_id": 0, "task_id": null}, "het": {"job_id": 0,'
        ' "job_offset": null}, "working_directory": "/shared/run"}]}'
    )
    wrapped = (
        '{"jobs": [{"job_id": 22, "name": "arr", "state": {"current": ["COMPLETED"]},'
        ' "exit_code": {"status": ["SUCCESS"], "return_code": {"set": true, "infinite": false, "number": 0}},'
        ' "nodes": "vm", "time": {"elapsed": 3}, "array": {"job_id": 20,'
        ' "task_id": {"set": true, "infinite": false, "number": 2}}, "het": {"job_id": 0}}]}'
    )
    [failed] = parse_sacct_json(plain)
    assert (failed.job_id, failed.state, failed.exit_code, failed.nodes, failed.node_count) == (
        "21",
        "FAILED",
        3,
        ["ts-compute1", "ts-compute2"],
        2,
    )
    [task] = parse_sacct_json(wrapped)
    assert (task.job_id, task.state, task.exit_code, task.elapsed_s) == ("20_2", "COMPLETED", 0, 3)
    with pytest.raises(ValueError, match="no 'jobs' list"):
        parse_sacct_json('{"errors": []}')


def test_a_requeued_job_is_its_latest_run_in_sacct_json() -> None:
    """sacct --json lists every run of a requeued job (22.05, recorded on the lab): the first run ended
    NODE_FAIL when its node was lost, the run after the requeue COMPLETED. The job is the latest run."""
    requeued = (
        '{"jobs": [{"job_id": 11, "name": "it-heal", "state": {"current": "NODE_FAIL", "reason": "None"},'
        ' "exit_code": {"status": "SUCCESS", "return_code": 0}, "nodes": "ts-elastic[1-2]",'
        ' "time": {"elapsed": 151, "submission": 1796522178}, "array": {"job_id": 0, "task_id": null},'
        ' "het": {"job_id": 0, "job_offset": null}},'
        ' {"job_id": 11, "name": "it-heal", "state": {"current": "COMPLETED", "reason": "BeginTime"},'
        ' "exit_code": {"status": "SUCCESS", "return_code": 0}, "nodes": "ts-elastic[1-2]",'
        ' "time": {"elapsed": 237, "submission": 1796522392}, "array": {"job_id": 0, "task_id": null},'
        ' "het": {"job_id": 0, "job_offset": null}}]}'
    )
    [job] = parse_sacct_json(requeued)
    assert (job.job_id, job.state, job.elapsed_s) == ("11", "COMPLETED", 237)


# ---------------------------------------------------------------- ids and one answer per job


@pytest.mark.parametrize("job_id", ["1234", "1234_7", "1234_[1-3]", "1234_[1,4-6%2]", "1234+0", " 1234 "])
def test_check_job_id_accepts(job_id: str) -> None:
    assert check_job_id(job_id) == job_id.strip()


@pytest.mark.parametrize("job_id", ["", "abc", "1234_", "1234+", "1234_[x]", "1234.batch", "12 13"])
def test_check_job_id_rejects(job_id: str) -> None:
    with pytest.raises(ValueError, match=r"job_id must be a Slurm job id: 1234, an array task 1234_7"):
        check_job_id(job_id)


def _r(job_id: str, state: str, code: int | None = None) -> JobInfo:
    return JobInfo(job_id=job_id, name="j", state=state, exit_code=code)


def test_select_records() -> None:
    records = [_r("13_[3-4]", "PENDING"), _r("13_2", "RUNNING"), _r("13_1", "COMPLETED"), _r("14", "RUNNING")]
    assert [r.job_id for r in select_records("13_4", records)] == ["13_[3-4]"]
    assert [r.job_id for r in select_records("13_[1-2]", records)] == ["13_2", "13_1"]
    assert select_records("13", records) == records
    het = [_r("16+0", "RUNNING"), _r("16+1", "PENDING")]
    assert [r.job_id for r in select_records("16+1", het)] == ["16+1"]


@pytest.mark.parametrize(
    ("states", "state"),
    [
        (["PENDING", "RUNNING"], "RUNNING"),
        (["PENDING", "PENDING"], "PENDING"),
        (["COMPLETING", "PENDING"], "COMPLETING"),
        (["COMPLETED", "FAILED"], "FAILED"),
        (["COMPLETED", "COMPLETED"], "COMPLETED"),
        (["COMPLETED", "RUNNING"], "RUNNING"),
    ],
)
def test_combine_state(states: list[str], state: str) -> None:
    info = combine("16", [_r(f"16+{i}", s) for i, s in enumerate(states)])
    assert info is not None
    assert (info.job_id, info.state, len(info.components)) == ("16", state, len(states))


def test_combine_keeps_the_worst_exit_code() -> None:
    info = combine("13", [_r("13_1", "COMPLETED", 0), _r("13_2", "FAILED", 3)])
    assert info is not None
    assert (info.state, info.exit_code) == ("FAILED", 3)
    assert combine("13", []) is None


def test_progress_and_timeout_lines() -> None:
    running = JobInfo(job_id="12", name="fsdp", state="RUNNING", nodelist="ts-compute[1-2]", elapsed_s=3725)
    assert progress_line(running, 3800.4, 7200) == (
        "job 12 (fsdp): RUNNING, elapsed 1:02:05 on ts-compute[1-2] [waited 1:03:20 of 2:00:00]"
    )
    pending = JobInfo(job_id="13_[1-3]", name="", state="PENDING", reason="Resources", elapsed_s=0)
    assert progress_line(pending, 5, 60, name="arr") == (
        "job 13_[1-3] (arr): PENDING (Resources), elapsed 0:00:00 [waited 0:00:05 of 0:01:00]"
    )
    msg = timeout_message(pending, 60, name="arr")
    assert msg.startswith("job 13_[1-3] (arr) is still pending (PENDING, reason Resources, elapsed 0:00:00)")
    assert "`scancel 13_[1-3]`" in msg and "job_id=13_[1-3] state=query wait=true" in msg
