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


# A requeued job's log, as --open-mode=append leaves it: the first attempt lost a node after step 7 (its last
# line cut short), the second resumed from the step-5 checkpoint and finished; a third was refused.
REQUEUED_LOG = """\
TRAINSTACK_ATTEMPT {"attempt": 0, "job_id": "12", "nodes": "ts-elastic[1-2]", "checkpoint": ""}
trainstack: job 12 on ts-elastic[1-2], rendezvous on ts-elastic1:29500
TRAINSTACK_METRIC {"step": 1, "loss": 9.1}
TRAINSTACK_METRIC {"step": 2, "loss": 8.7}
TRAINSTACK_METRIC {"step": 7, "loss": 7.0}
TRAINSTACK_METRIC {"step": 8, "lo
srun: error: ts-elastic2: task 1: Killed
TRAINSTACK_ATTEMPT {"attempt": 1, "job_id": "12", "nodes": "ts-elastic[1-2]", "checkpoint": "/c/step-5"}
TRAINSTACK_METRIC {"step": 6, "loss": 7.4}
TRAINSTACK_METRIC {"step": 20, "loss": 5.0}
TRAINSTACK_ATTEMPT {"attempt": 2, "job_id": "12", "nodes": "n1,n2", "checkpoint": "/c/step-20"}
TRAINSTACK_ATTEMPT_STOP {"attempt": 2, "reason": "requeued 2 times, more than the limit"}
"""


def test_every_attempt_of_a_requeued_job_is_read_from_its_log() -> None:
    attempts = output.job_attempts(REQUEUED_LOG)
    assert attempts == [
        {
            "attempt": 0,
            "job_id": "12",
            "nodes": "ts-elastic[1-2]",
            "checkpoint": None,
            "first_step": 1,
            "last_step": 7,
            "steps": 3,
        },
        {
            "attempt": 1,
            "job_id": "12",
            "nodes": "ts-elastic[1-2]",
            "checkpoint": "/c/step-5",
            "first_step": 6,
            "last_step": 20,
            "steps": 2,
        },
        {
            "attempt": 2,
            "job_id": "12",
            "nodes": "n1,n2",
            "checkpoint": "/c/step-20",
            "first_step": None,
            "last_step": None,
            "steps": 0,
            "stopped": "requeued 2 times, more than the limit",
        },
    ]


def test_a_log_without_attempt_markers_has_no_attempts() -> None:
    assert output.job_attempts('TRAINSTACK_METRIC {"step": 1}\n') == []


# ---------------------------------------------------------------- staged_listing

PAYLOAD = "/shared/trainstack/payloads/pytorch-fsdp/.staged-0123456789abcdef"
VENV = "/shared/trainstack/venvs/pytorch-fsdp-c34fe230bdf09912/.complete"
OPTIONS = "/shared/trainstack/payloads/pytorch-fsdp/.options-0123456789abcdef"


@pytest.mark.parametrize(
    ("stdout", "marks", "options"),
    [
        ("", [], None),
        (VENV, [VENV], None),
        (f"{PAYLOAD}\n{VENV}", [PAYLOAD, VENV], None),
        # The options text keeps its own lines, a `--` among them, as written.
        (
            f"{PAYLOAD}\n{VENV}\n{OPTIONS}\n--\nusage: train.py [-h]\n  --steps STEPS\n--\n  --lr LR",
            [PAYLOAD, VENV, OPTIONS],
            "usage: train.py [-h]\n  --steps STEPS\n--\n  --lr LR",
        ),
        # An empty options file is listed (and offers no option), not taken for a missing one.
        (f"{PAYLOAD}\n{OPTIONS}\n--", [PAYLOAD, OPTIONS], ""),
    ],
)
def test_staged_listing_splits_the_marks_from_the_recorded_options(stdout, marks, options) -> None:
    assert output.staged_listing(stdout) == {"marks": marks, "options": options}


# ---------------------------------------------------------------- partition_problem


@pytest.mark.parametrize(
    ("nodes", "partition", "problem"),
    [
        (3, "", ""),
        (4, "gpu", ""),
        (4, "", "4 nodes requested but partition 'default' has 3 (compute* 2, compute* 1, gpu 4, debug 1)"),
        (
            2,
            "missing",
            "2 nodes requested but partition 'missing' has 0 (compute* 2, compute* 1, gpu 4, debug 1)",
        ),
    ],
)
def test_the_partition_problem_names_the_count_and_quotes_sinfo(
    nodes: int, partition: str, problem: str
) -> None:
    assert output.partition_problem(SINFO, "", nodes, partition) == problem


def test_a_partition_sinfo_could_not_read_is_a_problem_whatever_the_count() -> None:
    error = "sinfo could not run: [Errno 2] No such file or directory: 'sinfo'"
    assert output.partition_problem([], error, 1) == f"the partition could not be read: {error}"
