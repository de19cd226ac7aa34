#!/usr/bin/env python3
"""Launch overhead of trainstack.cluster.launch_training on the lab, against a bare sbatch in the same run.

Measures, per launch of an already-staged test case: seconds from `ansible-playbook` start to the job being
RUNNING, and from the job leaving the queue to the playbook having the results on the controller. Job state
is sampled by polling squeue on the head node over one multiplexed SSH connection (about every 50 ms).

Each launch runs with the benchmark's own callback (bench/launch_overhead/callback, not the product's), which
timestamps the playbook's start and every task, so both times are split into phases: interpreter start,
imports and inventory; each file of the role's tasks up to the submit; sbatch; the scheduler to RUNNING;
and after the job, the poll that sees it end, each task that brings the results back, and the process exit.
Writes JSON (medians, phases, per-task medians and every sample) to bench/results/launch_overhead.json and a
stacked-bar PNG beside it where matplotlib imports (`PYTHONPATH=<dir of a matplotlib install>`).

    python -m bench.launch_overhead.run [--runs 5]      # make bench-launch
    python -m bench.launch_overhead.run --table A.json [B.json]   # markdown table of phases, side by side
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.support.lab import LAB_SSH, REPO, VENV_BIN, ansible_env
from bench.support.plotting import stacked_bars

CALLBACK_DIR = Path(__file__).resolve().parent / "callback"
SUBMIT_TASK = "Submit the job (or adopt the queued job of the same name)"
FOLLOW_TASK = "Follow the job until it ends"

HEAD = "root@10.77.0.11"
# One multiplexed connection for the ~50 ms squeue polls.
SSH = [*LAB_SSH, "-o", "ControlMaster=auto", "-o", "ControlPath=/tmp/ts-bench-%r@%h"]
SSH += ["-o", "ControlPersist=300"]


def on_head(command: str) -> str:
    return subprocess.run([*SSH, HEAD, command], capture_output=True, text=True, check=True).stdout.strip()


@dataclass
class StateWatcher:
    """Records when a job of a given name is first seen RUNNING and when it leaves the queue."""

    name: str
    running_at: float | None = None
    gone_at: float | None = None
    _seen: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self._stop.is_set():
            state = on_head(f"squeue --noheader --name {self.name} --format %T")
            now = time.time()
            if state:
                self._seen = True
            if state.startswith("RUNNING") and self.running_at is None:
                self.running_at = now
            if self._seen and not state and self.gone_at is None:
                self.gone_at = now
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()


def read_timeline(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _short(name: str) -> str:
    """A task's name without its role prefix ("trainstack.cluster.training_job : ")."""
    return name.rsplit(" : ", 1)[-1]


def _task_label(event: dict[str, Any]) -> str:
    return f"{event['file']}: {_short(event['name'])}"


def _phase_of(event: dict[str, Any]) -> str:
    """The group a task's seconds are charted under: its task file (the launch-host play is its own)."""
    file = event["file"]
    return "choose launch host (play 1)" if file.endswith("launch_training.yml") else file


def phases(
    timeline: list[dict[str, Any]], start: float, running: float, gone: float, end: float
) -> dict[str, dict[str, float]]:
    """Split start->RUNNING and gone->end into phases and tasks; each list of phases sums to its whole.

    A task's seconds run from its start to the next task's start, so the strategy's own work between tasks is
    charged to the task before it."""
    tasks = [e for e in timeline if e["event"] == "task_start"]
    ends = {e["name"]: e["t"] for e in timeline if e["event"] == "task_end"}
    loaded = next(e["t"] for e in timeline if e["event"] == "loaded")
    stats = next(e["t"] for e in timeline if e["event"] == "stats")
    starts = [e["t"] for e in tasks] + [stats]
    submit = next(i for i, e in enumerate(tasks) if _short(e["name"]) == SUBMIT_TASK)
    follow = next(i for i, e in enumerate(tasks) if _short(e["name"]) == FOLLOW_TASK)
    submitted = min(ends.get(tasks[submit]["name"], running), running)

    before: dict[str, float] = {
        "interpreter, imports, inventory": loaded - start,
        "playbook load to first task": tasks[0]["t"] - loaded,
    }
    before_tasks: dict[str, float] = {}
    for i in range(submit):
        seconds = starts[i + 1] - starts[i]
        before[_phase_of(tasks[i])] = before.get(_phase_of(tasks[i]), 0.0) + seconds
        before_tasks[_task_label(tasks[i])] = before_tasks.get(_task_label(tasks[i]), 0.0) + seconds
    before["submit task (sbatch, first squeue)"] = submitted - starts[submit]
    before["sbatch to RUNNING (scheduler)"] = running - submitted

    follow_end = ends.get(tasks[follow]["name"], starts[follow + 1])
    after: dict[str, float] = {"poll sees the job ended": follow_end - gone}
    after_tasks: dict[str, float] = {}
    for i in range(follow + 1, len(tasks)):
        begin = follow_end if i == follow + 1 else starts[i]
        seconds = starts[i + 1] - begin
        after[_phase_of(tasks[i])] = after.get(_phase_of(tasks[i]), 0.0) + seconds
        after_tasks[_task_label(tasks[i])] = after_tasks.get(_task_label(tasks[i]), 0.0) + seconds
    after["stats, callbacks, process exit"] = end - stats
    return {
        "start_to_running": before,
        "start_to_running_tasks": before_tasks,
        "end_to_results": after,
        "end_to_results_tasks": after_tasks,
    }


def timed_launch(name: str, timeline: Path) -> dict[str, Any]:
    watcher = StateWatcher(name)
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    timeline.unlink(missing_ok=True)
    env = ansible_env(
        ANSIBLE_CALLBACK_PLUGINS=str(CALLBACK_DIR),
        ANSIBLE_CALLBACKS_ENABLED="launch_timeline",
        TRAINSTACK_TIMELINE=str(timeline),
    )
    start = time.time()
    subprocess.run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "trainstack.cluster.launch_training",
            "-i",
            "inventories/local",
            "-e",
            "training_job_testcase=pytorch/fsdp",
            "-e",
            "training_job_nodes=2",
            "-e",
            f"training_job_name={name}",
            "-e",
            '{"training_job_args": {"steps": 3}}',
            "-e",
            "training_job_force=true",
        ],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    end = time.time()
    watcher.stop()
    thread.join()
    assert watcher.running_at and watcher.gone_at, "job state was not observed"
    return {
        "start_to_running_s": watcher.running_at - start,
        "end_to_results_s": end - watcher.gone_at,
        "phases": phases(read_timeline(timeline), start, watcher.running_at, watcher.gone_at, end),
    }


def median_parts(samples: list[dict[str, float]]) -> dict[str, float]:
    """Median of each part across samples, in the order the parts first appear (a missing part counts 0)."""
    names = list(dict.fromkeys(key for sample in samples for key in sample))
    return {key: statistics.median(sample.get(key, 0.0) for sample in samples) for key in names}


def bare_sbatch(name: str) -> float:
    """Baseline: seconds from calling sbatch (on the head node itself) to RUNNING."""
    out = on_head(
        f"t0=$(date +%s.%N); sbatch --parsable --job-name={name} --nodes=2 --wrap 'sleep 2' >/dev/null; "
        f'while [ "$(squeue -h -n {name} -o %T)" != RUNNING ]; do sleep 0.02; done; '
        f't1=$(date +%s.%N); echo "$t0 $t1"; while [ -n "$(squeue -h -n {name})" ]; do sleep 0.2; done'
    )
    t0, t1 = (float(x) for x in out.split())
    return t1 - t0


def plot(result: dict[str, Any], target: Path) -> str:
    launch = result["launch_training"]
    bars = {
        "launch_training: start to RUNNING": launch["start_to_running_phases_median"],
        "bare sbatch: submit to RUNNING": {
            "sbatch to RUNNING (scheduler)": result["bare_sbatch"]["submit_to_running_s_median"]
        },
        "launch_training: job end to results": launch["end_to_results_phases_median"],
    }
    title = (
        f"launch overhead, {result['cluster']}; medians of {result['runs']}"
        " (phase medians need not sum to the total's median)"
    )
    return stacked_bars(bars, target, title=title)


def table(documents: list[dict[str, Any]], names: list[str]) -> str:
    """Markdown: the medians and each phase's median, one column per result file (a phase absent is blank)."""
    rows: list[tuple[str, list[str]]] = []

    def row(label: str, values: list[float | None]) -> None:
        rows.append((label, ["" if v is None else f"{v:.2f}" for v in values]))

    launches = [d["launch_training"] for d in documents]
    row("**start to RUNNING (median)**", [x["start_to_running_s_median"] for x in launches])
    for key in ("start_to_running_phases_median",):
        for phase in dict.fromkeys(p for x in launches for p in x.get(key, {})):
            row(f"&nbsp;&nbsp;{phase}", [x.get(key, {}).get(phase) for x in launches])
    row(
        "**bare sbatch to RUNNING (median)**",
        [d["bare_sbatch"]["submit_to_running_s_median"] for d in documents],
    )
    row("**job end to results (median)**", [x["end_to_results_s_median"] for x in launches])
    for phase in dict.fromkeys(p for x in launches for p in x.get("end_to_results_phases_median", {})):
        row(f"&nbsp;&nbsp;{phase}", [x.get("end_to_results_phases_median", {}).get(phase) for x in launches])
    lines = [f"| seconds | {' | '.join(names)} |", f"|---|{'---:|' * len(names)}"]
    lines += [f"| {label} | {' | '.join(values)} |" for label, values in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "launch_overhead.json")
    parser.add_argument(
        "--table", type=Path, nargs="+", help="print a markdown table of these results, run nothing"
    )
    args = parser.parse_args()
    if args.table:
        print(
            table([json.loads(path.read_text()) for path in args.table], [path.stem for path in args.table])
        )
        return 0
    name = f"bench-launch-{os.getpid()}"
    timeline = Path(f"/tmp/ts-bench-timeline-{os.getpid()}.jsonl")
    timed_launch(name, timeline)  # stages payload and virtualenv; not counted
    launches = [timed_launch(name, timeline) for _ in range(args.runs)]
    baseline = [bare_sbatch(f"{name}-bare") for _ in range(args.runs)]
    result = {
        "benchmark": "launch_overhead",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cluster": "lab: 3 LXC nodes, Slurm 22.05, 2-core host",
        "host": f"{platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "testcase": "pytorch/fsdp tiny, 3 steps, 2 nodes",
        "runs": args.runs,
        "launch_training": {
            "start_to_running_s_median": statistics.median(r["start_to_running_s"] for r in launches),
            "end_to_results_s_median": statistics.median(r["end_to_results_s"] for r in launches),
            "start_to_running_phases_median": median_parts(
                [r["phases"]["start_to_running"] for r in launches]
            ),
            "end_to_results_phases_median": median_parts([r["phases"]["end_to_results"] for r in launches]),
            "start_to_running_tasks_median": median_parts(
                [r["phases"]["start_to_running_tasks"] for r in launches]
            ),
            "end_to_results_tasks_median": median_parts(
                [r["phases"]["end_to_results_tasks"] for r in launches]
            ),
            "samples": launches,
        },
        "bare_sbatch": {"submit_to_running_s_median": statistics.median(baseline), "samples": baseline},
        "target": "start_to_running_s_median <= 2.5 s once staged; end_to_results_s_median <= 1 s",
    }
    result["plot"] = plot(result, args.out.with_suffix(".png"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    launch = result["launch_training"]
    for key in ("start_to_running_phases_median", "end_to_results_phases_median"):
        print(key)
        for phase, seconds in launch[key].items():
            print(f"  {seconds:6.3f}  {phase}")
    print(
        f"launch_training: start->RUNNING {launch['start_to_running_s_median']:.2f} s, "
        f"end->results {launch['end_to_results_s_median']:.2f} s; "
        f"bare sbatch: {result['bare_sbatch']['submit_to_running_s_median']:.2f} s; plot: {result['plot']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
