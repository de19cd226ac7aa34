#!/usr/bin/env python3
"""Multi-node NCCL acceptance through Slurm, and the pairwise search that names slow nodes.

Why a pairwise search: an all-node all-reduce below the instance type's floor says the cluster is slow, not
which node is. Bus bandwidth of a ring is set by its slowest link, so every pair that contains a bad node is
slow and every pair of good nodes is fast. Measuring disjoint pairs (n/2 jobs that can run side by side) and
then re-pairing each member of a slow pair with a node already proven good names the culprit(s) in about
n/2 + 2k measurements for k slow nodes, instead of n(n-1)/2.

The measurement is a Slurm job running the ``nccl/collectives`` test case (or nccl-tests' all_reduce_perf),
whose output ``nccl_tests_output`` reads (staged next to this script). The all-node job may have run already
through the collection's launch path (the training_job role: same environment, staging and job following as
any training run); ``--first-output`` hands its log over, and only the search's jobs run here. The search only
sees a function ``nodes -> Measurement`` (or a plain bus bandwidth in GB/s), which is what the unit tests
replace. A job whose output cannot be read, or that did not check its results, says nothing about the nodes:
the search stops and reports why instead of calling the fabric slow. Wrong elements fail the check like a
slow job, and the search names the nodes whose pairs return them; a job that fails outright (non-zero exit,
no wrong elements to show) is a failure, not a bandwidth, and the search names the nodes whose jobs fail.
Standard library only: it runs on the login/head node.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nccl_tests_output import ParsedOutput, parse_output


@dataclass
class Measurement:
    """One job's reading: its bus bandwidth, and why it cannot be judged or was wrong, if so."""

    busbw_gbps: float | None
    problems: list[str] = field(default_factory=list)  # wrong elements, N/A, out-of-bounds values
    unchecked: bool = False  # the job did not check its results
    unparsable: str = ""
    output: dict[str, object] | None = None  # the parsed table, kept in the record

    @classmethod
    def from_output(cls, parsed: ParsedOutput) -> Measurement:
        """What the acceptance needs from a parsed table."""
        return cls(parsed.busbw_gbps, parsed.problems, parsed.unchecked, parsed.unparsable, asdict(parsed))


Measure = Callable[[Sequence[str]], "float | Measurement"]
# A job's verdict: ok, slow, wrong (wrong elements), failed (the job failed), or cannot be judged:
UNJUDGED = ("unparsable", "unchecked")
SEARCH_VERDICT = {"ok": "accepted", "slow": "slow", "wrong": "wrong_results", "failed": "failed"}


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
    wrong_results: list[str] = field(default_factory=list)  # nodes whose pairs return wrong elements
    failing: list[str] = field(default_factory=list)  # nodes whose pair jobs fail outright
    measurements: list[dict[str, object]] = field(default_factory=list)
    verdict: str = ""  # accepted, slow, wrong_results, failed, unparsable or unchecked (see the module doc)
    note: str = ""


def _verdict(result: Measurement, threshold: float) -> str:
    """Wrong elements outrank bandwidth: a fast ring that corrupts data is not acceptable either."""
    if result.unparsable:
        return "unparsable"
    if result.unchecked:
        return "unchecked"
    if result.problems:
        return "wrong"
    return "ok" if (result.busbw_gbps or 0.0) >= threshold else "slow"


def _measure(search: Search, measure: Measure, nodes: Sequence[str]) -> str:
    """Run one measurement, keep it in the record and return its verdict (a failed job has no bandwidth)."""
    error = None
    try:
        result = measure(nodes)
    except Exception as err:  # a hung or failed job is a finding, not a crash of the search
        result, error = Measurement(None), f"{type(err).__name__}: {err}"
    if not isinstance(result, Measurement):
        result = Measurement(float(result))
    verdict = "failed" if error else _verdict(result, search.threshold_gbps)
    search.measurements.append(
        {
            "nodes": list(nodes),
            "busbw_gbps": result.busbw_gbps,
            "verdict": verdict,
            "error": error,
            "problems": result.problems,
            "unparsable": result.unparsable,
            "output": result.output,
        }
    )
    return verdict


def _stop_unjudged(search: Search, verdict: str) -> Search:
    """The all-node job's output says nothing about the nodes: report why, blame nobody."""
    last = search.measurements[-1]
    search.verdict = verdict
    if verdict == "unparsable":
        search.note = f"the benchmark output could not be read: {last['unparsable']}"
    else:
        search.note = f"the benchmark did not check its results: {'; '.join(last['problems'][:3])}"
    return search


def _retest(search: Search, measure: Measure, suspects: list[str]) -> None:
    """Pair each suspect with a node proven good; sort it by what that job says."""
    reference = search.good[0]
    for node in suspects:
        verdict = _measure(search, measure, [reference, node])
        target = {"ok": search.good, "wrong": search.wrong_results, "failed": search.failing}.get(
            verdict, search.slow
        )
        (search.inconclusive if verdict in UNJUDGED else target).append(node)


def pairwise_search(nodes: Sequence[str], measure: Measure, threshold: float) -> Search:
    """Measure all nodes together; below ``threshold`` or with wrong results, find the culprits by pairs."""
    if len(set(nodes)) != len(nodes) or len(nodes) < 2:
        raise ValueError(f"nodes: need at least two distinct nodes, got {list(nodes)}")
    search = Search(nodes=list(nodes), threshold_gbps=threshold)
    verdict = _measure(search, measure, nodes)
    search.all_nodes_gbps = search.measurements[0]["busbw_gbps"]
    if verdict in UNJUDGED:
        return _stop_unjudged(search, verdict)
    search.verdict = SEARCH_VERDICT[verdict]
    if verdict == "ok":
        search.passed = True
        search.good = list(nodes)
        return search
    pairs = [list(nodes[i : i + 2]) for i in range(0, len(nodes) - 1, 2)]
    suspects: list[str] = [nodes[-1]] if len(nodes) % 2 else []
    for pair in pairs:
        verdict = _measure(search, measure, pair)
        if verdict == "ok":
            search.good.extend(pair)
        else:
            (search.inconclusive if verdict in UNJUDGED else suspects).extend(pair)
    if not search.good:
        # Every pair fails: either most nodes are bad or the fabric is; pairs cannot tell which.
        search.inconclusive += suspects
        search.note = (
            "every pair is below the floor, returns wrong results or fails: suspect the fabric or most nodes;"
            " pairs cannot tell"
        )
        return search
    _retest(search, measure, suspects)
    if search.inconclusive:
        search.note = "some jobs' output could not be judged: their nodes are inconclusive (see measurements)"
    elif not (search.slow or search.wrong_results or search.failing):
        search.note = "every pair passes: the shortfall needs more than two nodes (topology, switch, scale)"
    return search


# ---------------------------------------------------------------------------------------------- Slurm runs
def read_job(output: str, summary: Path | None, op: str = "all_reduce") -> Measurement:
    """The job's table from its stdout; a summary the command was asked to write must exist (run complete)."""
    parsed = parse_output(output, op)
    if not parsed.unparsable and summary is not None and not summary.is_file():
        parsed.unparsable = f"truncated run: the command did not write its summary {summary}"
    return Measurement.from_output(parsed)


@dataclass
class SlurmMeasure:
    """One srun job per measurement; the command is a template so that nccl-tests or our test case fit.

    ``--label`` prefixes each line with its task number, so the parser can tell rank 0's table from the rest
    (and notice a build without MPI, where every task prints a table of its own).
    """

    command: str
    partition: str = ""
    tasks_per_node: int = 1
    timeout: int = 900
    workdir: Path = Path(tempfile.gettempdir())
    extra: list[str] = field(default_factory=list)
    op: str = "all_reduce"

    def __call__(self, nodes: Sequence[str]) -> Measurement:
        """Run the job across ``nodes`` and read its table."""
        summary = self.workdir / f"nccl-acceptance-{'-'.join(nodes)}-{time.time_ns()}.json"
        argv = ["srun", f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}"]
        argv += [f"--ntasks-per-node={self.tasks_per_node}", "--kill-on-bad-exit=1", "--label", *self.extra]
        if self.partition:
            argv.append(f"--partition={self.partition}")
        command = self.command.format(master=nodes[0], summary=summary, nodes=len(nodes))
        argv += ["bash", "-c", command]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout, check=False)
        result = read_job(
            done.stdout + done.stderr, summary if "{summary}" in self.command else None, self.op
        )
        # Both tools exit non-zero on wrong elements: those are the finding, not the exit status.
        if done.returncode != 0 and not (result.problems and not result.unparsable):
            raise RuntimeError(f"srun rc={done.returncode}: {(done.stdout + done.stderr).strip()[-300:]}")
        return result


@dataclass
class RecordedFirst:
    """The all-node measurement read from a job that already ran; every later one is measured by ``then``."""

    nodes: list[str]
    output: Path
    summary: Path | None
    failure: str
    then: Measure
    op: str = "all_reduce"
    used: bool = False

    def __call__(self, nodes: Sequence[str]) -> float | Measurement:
        """The recorded job for the first call across every node, ``then`` for the rest."""
        if self.used or list(nodes) != self.nodes:
            return self.then(nodes)
        self.used = True
        text = self.output.read_text(encoding="utf-8", errors="replace") if self.output.is_file() else ""
        result = read_job(text, self.summary, self.op)
        if not self.output.is_file() and not self.failure:
            result.unparsable = f"the job left no log at {self.output}"
        # As for srun: wrong elements explain a failed job; anything else is the job failing.
        if self.failure and not (result.problems and not result.unparsable):
            raise RuntimeError(f"the launched job failed: {self.failure}")
        return result


def main(argv: list[str] | None = None) -> int:
    """0: accepted; 1: below the floor, wrong results or failed jobs (culprits named in the JSON);
    2: bad input; 3: the benchmark's output could not be judged (unreadable, or results not checked)."""
    parser = argparse.ArgumentParser(description="NCCL acceptance with a pairwise slow-node search")
    parser.add_argument("--nodes", required=True, help="comma-separated Slurm node names")
    parser.add_argument("--threshold-gbps", type=float, required=True)
    parser.add_argument("--command", required=True, help="bash command run by every task; {master} {summary}")
    parser.add_argument("--op", default="all_reduce", help="collective whose rows are judged")
    parser.add_argument("--tasks-per-node", type=int, default=1)
    parser.add_argument("--partition", default="")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--timeout", type=int, default=900)
    parser.add_argument("--srun-arg", action="append", default=[], help="extra srun argument (repeatable)")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--first-output", type=Path, help="log of the all-node job, already run")
    parser.add_argument("--first-summary", type=Path, help="summary that job was asked to write")
    parser.add_argument("--first-failed", default="", help="why that job failed (empty: it completed)")
    args = parser.parse_args(argv)
    nodes = [n.strip() for n in args.nodes.split(",") if n.strip()]
    if args.threshold_gbps <= 0 or args.tasks_per_node < 1:
        print("nccl_acceptance: --threshold-gbps must be > 0 and --tasks-per-node >= 1", file=sys.stderr)
        return 2
    measure: Measure = SlurmMeasure(
        args.command, args.partition, args.tasks_per_node, args.timeout, args.workdir, args.srun_arg, args.op
    )
    if args.first_output:
        measure = RecordedFirst(
            nodes, args.first_output, args.first_summary, args.first_failed, measure, args.op
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
    return 0 if search.passed else 3 if search.verdict in UNJUDGED else 1


if __name__ == "__main__":
    sys.exit(main())
