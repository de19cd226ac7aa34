#!/usr/bin/env python3
"""Launch overhead of trainstack.cluster.launch_training on the lab, against a bare sbatch in the same run.

Measures, per launch of an already-staged test case: seconds from `ansible-playbook` start to the job being
RUNNING, and from the job leaving the queue to the playbook having the results on the controller. Job state
is sampled by polling squeue on the head node over one multiplexed SSH connection (about every 50 ms).
Writes JSON (medians and every sample) to bench/results/launch_overhead.json.

    python -m bench.launch_overhead.run [--runs 5]      # make bench-launch
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.support.lab import LAB_SSH, REPO, VENV_BIN, ansible_env

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


def timed_launch(name: str) -> dict[str, float]:
    watcher = StateWatcher(name)
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
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
        env=ansible_env(),
        check=True,
        capture_output=True,
        text=True,
    )
    end = time.time()
    watcher.stop()
    thread.join()
    assert watcher.running_at and watcher.gone_at, "job state was not observed"
    return {"start_to_running_s": watcher.running_at - start, "end_to_results_s": end - watcher.gone_at}


def bare_sbatch(name: str) -> float:
    """Baseline: seconds from calling sbatch (on the head node itself) to RUNNING."""
    out = on_head(
        f"t0=$(date +%s.%N); sbatch --parsable --job-name={name} --nodes=2 --wrap 'sleep 2' >/dev/null; "
        f'while [ "$(squeue -h -n {name} -o %T)" != RUNNING ]; do sleep 0.02; done; '
        f't1=$(date +%s.%N); echo "$t0 $t1"; while [ -n "$(squeue -h -n {name})" ]; do sleep 0.2; done'
    )
    t0, t1 = (float(x) for x in out.split())
    return t1 - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "launch_overhead.json")
    args = parser.parse_args()
    name = f"bench-launch-{os.getpid()}"
    timed_launch(name)  # stages payload and virtualenv; not counted
    launches = [timed_launch(name) for _ in range(args.runs)]
    baseline = [bare_sbatch(f"{name}-bare") for _ in range(args.runs)]
    result = {
        "benchmark": "launch_overhead",
        "cluster": "lab: 3 LXC nodes, Slurm 22.05, 2-core host",
        "testcase": "pytorch/fsdp tiny, 3 steps, 2 nodes",
        "runs": args.runs,
        "launch_training": {
            "start_to_running_s_median": statistics.median(r["start_to_running_s"] for r in launches),
            "end_to_results_s_median": statistics.median(r["end_to_results_s"] for r in launches),
            "samples": launches,
        },
        "bare_sbatch": {"submit_to_running_s_median": statistics.median(baseline), "samples": baseline},
        "target": "start_to_running_s_median <= 5 s once staged",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("launch_training", "bare_sbatch")}))
    print(
        f"launch_training: start->RUNNING {result['launch_training']['start_to_running_s_median']:.2f} s, "
        f"end->results {result['launch_training']['end_to_results_s_median']:.2f} s; "
        f"bare sbatch: {result['bare_sbatch']['submit_to_running_s_median']:.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
