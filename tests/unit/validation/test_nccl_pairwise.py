"""Pairwise slow-node search of nccl_acceptance.py, driven by a fake measurement function.

The fake models what makes the search work on a real fabric: a ring runs at the speed of its slowest member,
so a job's bus bandwidth is the minimum of its nodes' own speeds (and, optionally, a ceiling at scale)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import ROOT, load

acc = load(ROOT / "roles/node_health/files/nccl_acceptance.py", "trainstack_nccl_acceptance")
NODES = [f"n{i}" for i in range(8)]
FLOOR = 280.0


class Fabric:
    """Nodes' own speeds; counts every job so that tests can bound the search's cost."""

    def __init__(self, slow=(), speed=350.0, slow_speed=120.0, scale_ceiling=None, failing=()):
        self.speeds = {n: (slow_speed if n in slow else speed) for n in NODES}
        self.scale_ceiling = scale_ceiling
        self.failing = set(failing)
        self.jobs: list[list[str]] = []

    def __call__(self, nodes):
        self.jobs.append(list(nodes))
        if self.failing & set(nodes):
            raise RuntimeError("srun rc=1: NCCL WARN NET/OFI error")
        value = min(self.speeds[n] for n in nodes)
        if self.scale_ceiling and len(nodes) > 2:
            value = min(value, self.scale_ceiling)
        return value


def test_healthy_cluster_is_accepted_with_one_job():
    fabric = Fabric()
    search = acc.pairwise_search(NODES, fabric, FLOOR)
    assert search.passed and search.slow == [] and fabric.jobs == [NODES]


@pytest.mark.parametrize("slow", [("n3",), ("n0", "n5"), ("n6", "n7"), ("n1", "n2", "n4")])
def test_slow_nodes_are_named(slow):
    fabric = Fabric(slow=slow)
    search = acc.pairwise_search(NODES, fabric, FLOOR)
    assert not search.passed
    assert sorted(search.slow) == sorted(slow)
    assert sorted(search.good) == sorted(set(NODES) - set(slow))
    # 1 all-node job + 4 pairs + 2 re-tests per slow pair at most: far below the 28 pairs of a full sweep.
    assert len(fabric.jobs) <= 1 + len(NODES) // 2 + 2 * len(slow)


def test_odd_node_count_retests_the_leftover():
    nodes = NODES[:5]
    search = acc.pairwise_search(nodes, Fabric(slow=("n4",)), FLOOR)
    assert search.slow == ["n4"] and sorted(search.good) == nodes[:4]


def test_failed_job_names_the_node_and_is_recorded():
    search = acc.pairwise_search(NODES, Fabric(failing=("n2",)), FLOOR)
    assert search.failing == ["n2"] and search.slow == [] and search.verdict == "failed"
    errors = [m for m in search.measurements if m["error"]]
    assert errors and all("n2" in m["nodes"] for m in errors)
    assert "NET/OFI" in errors[0]["error"]


def test_all_pairs_slow_is_inconclusive_not_blamed_on_everyone():
    search = acc.pairwise_search(NODES, Fabric(slow=NODES), FLOOR)
    assert search.slow == [] and sorted(search.inconclusive) == NODES
    assert "fabric" in search.note


def test_shortfall_only_at_scale_names_nobody():
    search = acc.pairwise_search(NODES, Fabric(scale_ceiling=200.0), FLOOR)
    assert not search.passed and search.slow == [] and search.inconclusive == []
    assert "more than two nodes" in search.note


def test_bad_node_list_is_refused():
    with pytest.raises(ValueError, match="nodes: need at least two distinct"):
        acc.pairwise_search(["a", "a"], Fabric(), FLOOR)


def test_cli_bad_input():
    script = ROOT / "roles/node_health/files/nccl_acceptance.py"
    done = subprocess.run(
        [sys.executable, str(script), "--nodes", "a", "--threshold-gbps", "10", "--command", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "need at least two distinct nodes" in done.stderr
