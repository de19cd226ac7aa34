#!/usr/bin/env python3
"""Multi-node NCCL acceptance through Slurm, and the pairwise search that names slow nodes.

Why a pairwise search: an all-node all-reduce below the instance type's floor says the cluster is slow, not
which node is. Bus bandwidth of a ring is set by its slowest link, so every pair that contains a bad node is
slow and every pair of good nodes is fast. Measuring disjoint pairs (n/2 jobs that can run side by side) and
then re-pairing each member of a slow pair with a node already proven good names the culprit(s) in about
n/2 + 2k measurements for k slow nodes, instead of n(n-1)/2.

The measurement is a Slurm job running the ``nccl/collectives`` test case (or nccl-tests' all_reduce_perf);
the search only sees a function ``nodes -> bus bandwidth in GB/s``, which is what the unit tests replace.
Standard library only: it runs on the login/head node.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

Measure = Callable[[Sequence[str]], float]
NCCL_TESTS_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\w+\s+(\w+\s+-?\d+\s+)?[\d.]+\s+[\d.]+\s+([\d.]+)\s")


@dataclass
class Search:
    """Outcome of an acceptance run: the all-node figure, and when it is short, who is to blame."""

    nodes: list[str]
    threshold_gbps: float
    all_nodes_gbps: float | None = None
    passed: bool = False
    slow: list[str] = field(default_factory=list)
    good: list[str] = field(default_factory=list)
    inconclusive: list[str] = field(default_factory=list)
    measurements: list[dict[str, object]] = field(default_factory=list)
    note: str = ""


def _measure(search: Search, measure: Measure, nodes: Sequence[str]) -> float:
    """Run one measurement and keep it in the record (a failed job counts as 0 GB/s: it is not acceptable)."""
    try:
        value = float(measure(nodes))
        error = None
    except Exception as err:  # a hung or failed job is a finding, not a crash of the search
        value, error = 0.0, f"{type(err).__name__}: {err}"
    search.measurements.append({"nodes": list(nodes), "busbw_gbps": value, "error": error})
    return value


def pairwise_search(nodes: Sequence[str], measure: Measure, threshold: float) -> Search:
    """Measure all nodes together; below ``threshold``, find the slow nodes by pairs (see the module doc)."""
    if len(set(nodes)) != len(nodes) or len(nodes) < 2:
        raise ValueError(f"nodes: need at least two distinct nodes, got {list(nodes)}")
    search = Search(nodes=list(nodes), threshold_gbps=threshold)
    search.all_nodes_gbps = _measure(search, measure, nodes)
    if search.all_nodes_gbps >= threshold:
        search.passed = True
        search.good = list(nodes)
        return search
    pairs = [list(nodes[i : i + 2]) for i in range(0, len(nodes) - 1, 2)]
    leftover = [nodes[-1]] if len(nodes) % 2 else []
    suspects: list[str] = list(leftover)
    for pair in pairs:
        if _measure(search, measure, pair) >= threshold:
            search.good.extend(pair)
        else:
            suspects.extend(pair)
    if not search.good:
        # Every pair is slow: either most nodes are bad or the fabric is; pairs cannot tell which.
        search.inconclusive = suspects
        search.note = "every pair is below the floor: suspect the fabric or most nodes; pairs cannot tell"
        return search
    reference = search.good[0]
    for node in suspects:
        if _measure(search, measure, [reference, node]) >= threshold:
            search.good.append(node)
        else:
            search.slow.append(node)
    if not search.slow:
        search.note = "every pair passes: the shortfall needs more than two nodes (topology, switch, scale)"
    return search


# ---------------------------------------------------------------------------------------------- Slurm runs
def parse_busbw(output: str, summary: Path | None, op: str = "all_reduce") -> float:
    """Bus bandwidth at the largest size: from our test case's summary JSON, else from nccl-tests rows."""
    if summary is not None and summary.is_file():
        data = json.loads(summary.read_text(encoding="utf-8"))
        return float(data["max_busbw_gbps"][op])
    rows = [(int(m.group(1)), float(m.group(4))) for m in map(NCCL_TESTS_ROW.match, output.splitlines()) if m]
    if not rows:
        raise ValueError(f"no bus bandwidth in the job output: {output.strip()[-300:]}")
    return max(rows)[1]


@dataclass
class SlurmMeasure:
    """One srun job per measurement; the command is a template so that nccl-tests or our test case fit."""

    command: str
    partition: str = ""
    tasks_per_node: int = 1
    timeout: int = 900
    workdir: Path = Path(tempfile.gettempdir())
    extra: list[str] = field(default_factory=list)

    def __call__(self, nodes: Sequence[str]) -> float:
        """Run the job across ``nodes`` and return its bus bandwidth."""
        summary = self.workdir / f"nccl-acceptance-{'-'.join(nodes)}-{time.time_ns()}.json"
        argv = ["srun", f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}"]
        argv += [f"--ntasks-per-node={self.tasks_per_node}", "--kill-on-bad-exit=1", *self.extra]
        if self.partition:
            argv.append(f"--partition={self.partition}")
        command = self.command.format(master=nodes[0], summary=summary, nodes=len(nodes))
        argv += ["bash", "-c", command]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"srun rc={done.returncode}: {(done.stdout + done.stderr).strip()[-300:]}")
        return parse_busbw(done.stdout, summary)


def main(argv: list[str] | None = None) -> int:
    """0: accepted; 1: below the floor (slow nodes named in the JSON); 2: bad input."""
    parser = argparse.ArgumentParser(description="NCCL acceptance with a pairwise slow-node search")
    parser.add_argument("--nodes", required=True, help="comma-separated Slurm node names")
    parser.add_argument("--threshold-gbps", type=float, required=True)
    parser.add_argument("--command", required=True, help="bash command run by every task; {master} {summary}")
    parser.add_argument("--tasks-per-node", type=int, default=1)
    parser.add_argument("--partition", default="")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--timeout", type=int, default=900)
    parser.add_argument("--srun-arg", action="append", default=[], help="extra srun argument (repeatable)")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    nodes = [n.strip() for n in args.nodes.split(",") if n.strip()]
    if args.threshold_gbps <= 0 or args.tasks_per_node < 1:
        print("nccl_acceptance: --threshold-gbps must be > 0 and --tasks-per-node >= 1", file=sys.stderr)
        return 2
    measure = SlurmMeasure(
        args.command, args.partition, args.tasks_per_node, args.timeout, args.workdir, args.srun_arg
    )
    try:
        search = pairwise_search(nodes, measure, args.threshold_gbps)
    except ValueError as err:
        print(f"nccl_acceptance: --{err}", file=sys.stderr)
        return 2
    text = json.dumps(asdict(search), indent=2)
    if args.output:
        args.output.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0 if search.passed else 1


if __name__ == "__main__":
    sys.exit(main())
