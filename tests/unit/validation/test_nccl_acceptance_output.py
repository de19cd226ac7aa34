"""nccl_acceptance.py judging jobs by their parsed output: unreadable or unchecked output blames no node,
wrong elements name the nodes that return them, and the CLI's exit status and record say which case it was.

The CLI test runs the real script with a stand-in ``srun`` first on PATH that prints a fixture (this host has
no Slurm); the lab test (tests/integration/validation/) runs it through the lab's real srun.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import FIXTURES, ROOT, fake_srun_dir, load

acc = load(ROOT / "roles/node_health/files/nccl_acceptance.py", "trainstack_nccl_acceptance_output")
SCRIPT = ROOT / "roles/node_health/files/nccl_acceptance.py"
NODES = [f"n{i}" for i in range(6)]
FLOOR = 280.0


def job(fixture: str, **replace: str):
    """A measurement function that answers every job with a fixture's text, read by the real parser."""
    text = (FIXTURES / fixture).read_text(encoding="utf-8")
    for old, new in replace.items():
        text = text.replace(old, new)
    return lambda nodes: acc.read_job(text, None)


def test_a_clean_run_is_accepted_on_its_parsed_bandwidth():
    search = acc.pairwise_search(NODES, job("nccl-tests-all_reduce.srun-label.txt"), FLOOR)
    assert search.passed and search.verdict == "accepted" and search.all_nodes_gbps == 348.16
    record = search.measurements[0]
    assert record["verdict"] == "ok" and record["output"]["rows"][-1]["in_place"]["busbw_gbps"] == 343.90


@pytest.mark.parametrize(
    ("fixture", "verdict", "note"),
    [
        ("nccl-tests-all_reduce.truncated.txt", "unparsable", "could not be read: truncated run"),
        ("nccl-tests-all_reduce.nccl-failure.txt", "unparsable", "could not be read: error text"),
        ("nccl-tests-all_reduce.separate-runs.txt", "unparsable", "could not be read: tables from 2 ranks"),
        ("nccl-tests-all_reduce.no-check.txt", "unchecked", "did not check its results: 1048576 B"),
    ],
)
def test_output_that_cannot_be_judged_blames_no_node(fixture, verdict, note):
    calls: list[list[str]] = []
    measure = job(fixture)

    def counted(nodes):
        calls.append(list(nodes))
        return measure(nodes)

    search = acc.pairwise_search(NODES, counted, FLOOR)
    assert not search.passed and search.verdict == verdict and note in search.note
    assert search.slow == [] and search.wrong_results == [] and calls == [NODES]  # no pair search


def test_wrong_elements_name_the_node_that_returns_them():
    clean, wrong = job("nccl-tests-all_reduce.txt"), job("nccl-tests-all_reduce.wrong.txt")
    search = acc.pairwise_search(NODES, lambda nodes: (wrong if "n3" in nodes else clean)(nodes), FLOOR)
    assert search.verdict == "wrong_results" and not search.passed
    assert search.wrong_results == ["n3"] and search.slow == [] and "n3" not in search.good
    assert "1048580 wrong elements" in search.measurements[0]["problems"][0]


def test_an_unreadable_pair_is_inconclusive_not_slow():
    slow = job("nccl-tests-all_reduce.txt", **{"348.16": "120.00"})
    clean, cut = job("nccl-tests-all_reduce.txt"), job("nccl-tests-all_reduce.truncated.txt")

    def measure(nodes):
        if len(nodes) == len(NODES):
            return slow(nodes)
        return (cut if "n4" in nodes else clean)(nodes)

    search = acc.pairwise_search(NODES, measure, FLOOR)
    assert search.verdict == "slow" and sorted(search.inconclusive) == ["n4", "n5"] and search.slow == []
    assert "could not be judged" in search.note


def test_a_summary_the_command_did_not_write_means_truncated(tmp_path):
    text = (FIXTURES / "collectives.cpu-2ranks.txt").read_text(encoding="utf-8")
    absent = acc.read_job(text, tmp_path / "absent.json")
    assert absent.unparsable.startswith("truncated run: the command did not write its summary")
    (tmp_path / "s.json").write_text("{}")
    assert acc.read_job(text, tmp_path / "s.json").busbw_gbps == 0.25


@pytest.fixture
def fake_srun(tmp_path):
    """run(fixture, rc) -> (process, result record, srun argv) through the stand-in srun (see conftest)."""
    bin_dir = fake_srun_dir(tmp_path)

    def run(fixture: str, rc: int = 0) -> tuple[subprocess.CompletedProcess, dict, list[str]]:
        env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", FAKE_SRUN_RC=str(rc))
        env.update(FAKE_SRUN_FIXTURE=str(FIXTURES / fixture), FAKE_SRUN_ARGV=str(tmp_path / "argv"))
        argv = [sys.executable, str(SCRIPT), "--nodes", "a,b", "--threshold-gbps", "280"]
        argv += ["--command", "exec all_reduce_perf -b 1M -e 1G", "--output", str(tmp_path / "r.json")]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=60)
        result = json.loads(Path(tmp_path / "r.json").read_text(encoding="utf-8"))
        return done, result, (tmp_path / "argv").read_text(encoding="utf-8").split("\n")

    return run


def test_cli_accepts_a_labelled_run(fake_srun):
    done, result, argv = fake_srun("nccl-tests-all_reduce.srun-label.txt")
    assert done.returncode == 0 and result["verdict"] == "accepted" and result["all_nodes_gbps"] == 348.16
    assert "--label" in argv  # each line names its task, so the parser can tell the tables apart


def test_cli_exit_3_for_unreadable_output(fake_srun):
    done, result, _ = fake_srun("nccl-tests-all_reduce.truncated.txt")
    assert done.returncode == 3 and result["verdict"] == "unparsable" and result["slow"] == []
    assert "truncated run" in result["note"]


def test_cli_wrong_elements_with_a_failing_exit_are_wrong_results(fake_srun):
    """Both tools exit non-zero on wrong elements: the table, not the exit status, is the finding."""
    done, result, _ = fake_srun("nccl-tests-all_reduce.wrong.txt", rc=1)
    assert done.returncode == 1 and result["verdict"] == "wrong_results" and result["failing"] == []
    assert "1048580 wrong elements" in result["measurements"][0]["problems"][0]


def test_cli_a_failed_job_is_a_failure_not_a_bandwidth(tmp_path, fake_srun):
    (tmp_path / "missing.txt").write_text(
        "bash: line 1: exec: all_reduce_perf: not found\n", encoding="utf-8"
    )
    done, result, _ = fake_srun(str(tmp_path / "missing.txt"), rc=127)
    assert done.returncode == 1 and result["verdict"] == "failed" and result["all_nodes_gbps"] is None
    assert result["slow"] == [] and "srun rc=127" in result["measurements"][0]["error"]


@pytest.fixture
def recorded(tmp_path):
    """run(fixture, *extra) -> (process, record, srun argv): the all-node job's log is handed over as the
    training_job launch left it (its own banner line first); later jobs go through the stand-in srun."""

    def run(fixture: str | None, *extra: str) -> tuple[subprocess.CompletedProcess, dict, list[str]]:
        log = tmp_path / "run" / "job.log"
        log.parent.mkdir(exist_ok=True)
        if fixture:
            banner = "trainstack: job 42 on a,b, rendezvous on a:29500\n"
            log.write_text(banner + (FIXTURES / fixture).read_text(encoding="utf-8"), encoding="utf-8")
        env = dict(os.environ, PATH=f"{fake_srun_dir(tmp_path)}:{os.environ['PATH']}", FAKE_SRUN_RC="0")
        env.update(FAKE_SRUN_FIXTURE=str(FIXTURES / "nccl-tests-all_reduce.txt"))
        env.update(FAKE_SRUN_ARGV=str(tmp_path / "argv"))
        argv = [sys.executable, str(SCRIPT), "--nodes", "a,b", "--command", "exec all_reduce_perf"]
        argv += ["--output", str(tmp_path / "r.json"), "--first-output", str(log), *extra]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, timeout=60)
        result = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
        srun = tmp_path / "argv"
        return done, result, srun.read_text(encoding="utf-8").split("\n") if srun.exists() else []

    return run


def test_a_launched_run_that_passes_needs_no_srun_job(recorded):
    done, result, srun = recorded("nccl-tests-all_reduce.txt", "--threshold-gbps", "280")
    assert done.returncode == 0 and result["verdict"] == "accepted" and result["all_nodes_gbps"] == 348.16
    assert srun == [] and len(result["measurements"]) == 1


def test_a_launched_run_below_the_floor_is_searched_with_srun(recorded):
    done, result, srun = recorded("nccl-tests-all_reduce.txt", "--threshold-gbps", "400")
    assert done.returncode == 1 and result["verdict"] == "slow" and result["all_nodes_gbps"] == 348.16
    assert [m["nodes"] for m in result["measurements"]] == [["a", "b"], ["a", "b"]]
    assert "--nodelist=a,b" in srun  # the pair was measured by srun, not read again from the record


def test_a_launched_job_that_failed_is_a_failure(recorded):
    done, result, _ = recorded(
        "nccl-tests-all_reduce.nccl-failure.txt",
        "--threshold-gbps",
        "280",
        "--first-failed",
        "job 42 ended FAILED (exit code 1)",
    )
    assert done.returncode == 1 and result["verdict"] == "failed" and result["slow"] == []
    assert (
        result["measurements"][0]["error"]
        == "RuntimeError: the launched job failed: job 42 ended FAILED (exit code 1)"
    )


def test_a_launched_job_failing_on_wrong_elements_is_wrong_results(recorded):
    done, result, _ = recorded(
        "nccl-tests-all_reduce.wrong.txt", "--threshold-gbps", "280", "--first-failed", "job 42 ended FAILED"
    )
    assert done.returncode == 1 and result["verdict"] == "wrong_results" and result["failing"] == []


def test_a_launched_job_without_a_log_cannot_be_judged(recorded):
    done, result, srun = recorded(None, "--threshold-gbps", "280")
    assert done.returncode == 3 and result["verdict"] == "unparsable" and srun == []
    assert "left no log" in result["note"]
