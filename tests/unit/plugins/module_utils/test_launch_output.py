"""What the launch reads back from sinfo, a test case's argument check and a local run (launch/output.py)."""

from __future__ import annotations

import pytest
from ansible_collections.trainstack.cluster.plugins.module_utils.launch import output

# sinfo --noheader --format='%P %D' on a cluster with two partitions, the default one in two node states.
SINFO = ["compute* 2", "compute* 1", "gpu 4", "debug 1"]


@pytest.mark.parametrize(
    ("partition", "nodes"),
    [("", 3), ("compute", 3), ("gpu", 4), ("debug", 1), ("missing", 0), ("comp", 0)],
)
def test_the_partitions_nodes_are_summed_over_its_states(partition: str, nodes: int) -> None:
    assert output.partition_nodes(SINFO, partition) == nodes


def test_lines_that_are_not_a_partition_and_a_count_are_skipped() -> None:
    assert output.partition_nodes(["", "compute* n/a", "compute* 2 extra", "compute* 2"]) == 2


def test_the_refusal_is_the_last_error_line_or_the_whole_output() -> None:
    usage = "usage: train.py [-h] [--tp TP]\ntrain.py: error: --tp 3 does not divide 8 heads\n"
    assert output.rules_refusal(usage) == "--tp 3 does not divide 8 heads"
    assert output.rules_refusal("error: first\nerror: second\n") == "second"
    assert output.rules_refusal("  Traceback: boom\n") == "Traceback: boom"


@pytest.mark.parametrize(
    ("delta", "seconds"), [("0:00:00", 0.0), ("0:01:02.25", 62.2), ("2:00:00.06", 7200.1), ("", 0.0)]
)
def test_a_commands_delta_is_seconds(delta: str, seconds: float) -> None:
    assert output.duration_seconds(delta) == seconds
