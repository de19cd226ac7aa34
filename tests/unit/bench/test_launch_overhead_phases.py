"""bench/launch_overhead/run.py splits each launch into phases from the callback's timeline: the phases of
start->RUNNING and of job end->results each add up to the whole, task by task, so no second goes unnamed."""

from __future__ import annotations

import math

from bench.launch_overhead import run

PREFIX = "trainstack.cluster.training_job : "


def _task(t: float, name: str, file: str) -> list[dict[str, object]]:
    return [
        {"t": t, "event": "task_start", "name": PREFIX + name, "file": file},
        {"t": t + 0.05, "event": "task_end", "name": PREFIX + name, "status": "ok"},
    ]


def _timeline() -> list[dict[str, object]]:
    events: list[dict[str, object]] = [{"t": 100.8, "event": "loaded"}]
    events += _task(101.0, "Name the launch host", "launch_training.yml")
    events += _task(101.2, "Read the launch host's OS and architecture", "validate.yml")
    events += _task(101.9, "Hash the payload", "stage.yml")
    events += _task(102.3, run.SUBMIT_TASK, "launch-slurm.yml")
    events[-1]["t"] = 102.6  # the submit task ends
    events += _task(102.7, run.FOLLOW_TASK, "launch-slurm.yml")
    events[-1]["t"] = 110.4  # the follow task ends
    events += _task(110.5, "Fetch the log and summary", "collect.yml")
    events += _task(110.9, "Results", "collect.yml")
    events.append({"t": 111.0, "event": "stats"})
    return events


def test_phases_add_up_to_both_totals() -> None:
    start, running, gone, end = 100.0, 103.0, 110.0, 111.3
    parts = run.phases(_timeline(), start, running, gone, end)
    assert math.isclose(sum(parts["start_to_running"].values()), running - start)
    assert math.isclose(sum(parts["end_to_results"].values()), end - gone)
    assert math.isclose(parts["start_to_running"]["interpreter, imports, inventory"], 0.8)
    assert math.isclose(parts["start_to_running"]["validate.yml"], 0.7)
    assert math.isclose(parts["start_to_running"]["submit task (sbatch, first squeue)"], 0.3)
    assert math.isclose(parts["start_to_running"]["sbatch to RUNNING (scheduler)"], 0.4)
    assert math.isclose(parts["end_to_results"]["poll sees the job ended"], 0.4)
    assert math.isclose(parts["end_to_results"]["collect.yml"], 0.6)
    assert math.isclose(parts["end_to_results_tasks"]["collect.yml: Fetch the log and summary"], 0.5)


def test_a_job_running_before_the_submit_task_returns_charges_nothing_to_the_scheduler() -> None:
    parts = run.phases(_timeline(), 100.0, 102.45, 110.0, 111.3)
    assert math.isclose(parts["start_to_running"]["submit task (sbatch, first squeue)"], 0.15)
    assert parts["start_to_running"]["sbatch to RUNNING (scheduler)"] == 0.0
    assert math.isclose(sum(parts["start_to_running"].values()), 2.45)
