#!/usr/bin/env python3
"""Prometheus exporter for Slurm node and job state, from ``sinfo`` and ``squeue`` on each scrape.

Why our own: the community Slurm exporters are Go binaries that are not in Debian and cannot be fetched
here; what a training cluster's dashboard needs is small (nodes per state with their reasons, jobs per state
and partition, nodes and GPUs held by running jobs) and two commands give it. Standard library only.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SINFO = ["sinfo", "-h", "-N", "-o", "%N|%T|%P|%E"]
SQUEUE = ["squeue", "-h", "-o", "%T|%P|%D|%b"]


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def _gpus(gres: str) -> int:
    """GPUs per node from squeue's %b (``gres/gpu:8``, ``gres:gpu:h100:8``, ``N/A``)."""
    if "gpu" not in gres:
        return 0
    tail = gres.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 1


def render_nodes(sinfo: str) -> list[str]:
    """One sample per node (state and reason as labels) and a count per state."""
    lines = [
        "# HELP slurm_node_state Slurm node state (1 per node; state and reason as labels).",
        "# TYPE slurm_node_state gauge",
    ]
    per_state: Counter[str] = Counter()
    seen = set()
    for row in sinfo.splitlines():
        parts = row.split("|", 3)
        if len(parts) != 4 or parts[0] in seen:
            continue  # a node in two partitions is listed twice; count it once
        seen.add(parts[0])
        node, state, _partition, reason = parts
        per_state[state] += 1
        lines.append(
            f'slurm_node_state{{node="{_label(node)}",state="{_label(state)}",reason="{_label(reason)}"}} 1'
        )
    lines += ["# HELP slurm_nodes Slurm nodes per state.", "# TYPE slurm_nodes gauge"]
    lines += [f'slurm_nodes{{state="{_label(s)}"}} {n}' for s, n in sorted(per_state.items())]
    return lines


def render_jobs(squeue: str) -> list[str]:
    """Jobs per state and partition; nodes and GPUs held by running jobs per partition."""
    jobs: Counter[tuple[str, str]] = Counter()
    nodes: Counter[str] = Counter()
    gpus: Counter[str] = Counter()
    for row in squeue.splitlines():
        parts = row.split("|", 3)
        if len(parts) != 4:
            continue
        state, partition, count, gres = parts
        jobs[(state, partition)] += 1
        if state == "RUNNING" and count.isdigit():
            nodes[partition] += int(count)
            gpus[partition] += int(count) * _gpus(gres)
    lines = ["# HELP slurm_jobs Slurm jobs per state and partition.", "# TYPE slurm_jobs gauge"]
    lines += [
        f'slurm_jobs{{state="{_label(s)}",partition="{_label(p)}"}} {n}' for (s, p), n in sorted(jobs.items())
    ]
    lines += [
        "# HELP slurm_running_job_nodes Nodes held by running jobs.",
        "# TYPE slurm_running_job_nodes gauge",
    ]
    lines += [f'slurm_running_job_nodes{{partition="{_label(p)}"}} {n}' for p, n in sorted(nodes.items())]
    lines += [
        "# HELP slurm_running_job_gpus GPUs held by running jobs.",
        "# TYPE slurm_running_job_gpus gauge",
    ]
    lines += [f'slurm_running_job_gpus{{partition="{_label(p)}"}} {n}' for p, n in sorted(gpus.items())]
    return lines


def collect() -> str:
    """Run both commands; a failing command becomes slurm_up 0 rather than a failed scrape."""
    outputs = []
    for argv in (SINFO, SQUEUE):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
            outputs.append(done.stdout if done.returncode == 0 else None)
        except (OSError, subprocess.TimeoutExpired):
            outputs.append(None)
    up = all(out is not None for out in outputs)
    lines = [
        "# HELP slurm_up Whether sinfo and squeue answered.",
        "# TYPE slurm_up gauge",
        f"slurm_up {int(up)}",
    ]
    if up:
        lines += render_nodes(outputs[0] or "") + render_jobs(outputs[1] or "")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Serve /metrics, or print once with --once."""
    parser = argparse.ArgumentParser(description="Slurm exporter (sinfo/squeue)")
    parser.add_argument("--address", default="127.0.0.1", help="listen address (loopback unless given)")
    parser.add_argument("--port", type=int, default=9717)
    parser.add_argument("--once", action="store_true")
    args = parser.parse_args(argv)
    if args.once:
        print(collect(), end="")
        return 0

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = collect().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    ThreadingHTTPServer((args.address, args.port), Handler).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
