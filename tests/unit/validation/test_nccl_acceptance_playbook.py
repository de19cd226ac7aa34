"""The nccl_acceptance play end to end on this host, with a stand-in ``srun`` that prints a fixture.

No Slurm here (the lab test runs the real one), so ``srun`` first on PATH records its arguments and prints the
nccl-tests output named by $FAKE_SRUN_FIXTURE; everything else is the real play: input checks, staging, the
search driver and parser, the result record and the failure messages for each verdict.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.support import VENV_BIN, ansible_env, playbook

from .conftest import FIXTURES, fake_srun_dir


@pytest.fixture
def play(tmp_path):
    """play(fixture, *extra_args) -> (process, flattened stdout, result record, srun argv)."""
    bin_dir = fake_srun_dir(tmp_path)
    inventory = tmp_path / "hosts.yml"
    host = json.dumps({"ansible_connection": "local", "ansible_python_interpreter": sys.executable})
    inventory.write_text(f"head:\n  hosts:\n    ts-head: {host}\n", encoding="utf-8")
    results = tmp_path / "results"

    def run(fixture: str, *extra: str, rc: int = 0):
        env = ansible_env(
            PATH=f"{bin_dir}:{VENV_BIN}:{os.environ['PATH']}",
            FAKE_SRUN_FIXTURE=str(FIXTURES / fixture),
            FAKE_SRUN_ARGV=str(tmp_path / "argv"),
            FAKE_SRUN_RC=str(rc),
        )
        args = ["-i", str(inventory), "-e", json.dumps({"nccl_acceptance_nodes": ["n1", "n2"]})]
        args += [
            "-e",
            f"nccl_acceptance_shared_dir={tmp_path / 'shared'}",
            "-e",
            f"nccl_acceptance_results_dir={results}",
        ]
        args += ["-e", "ec2_instance_type=p5.48xlarge", *extra]
        done = playbook("nccl_acceptance", *args, check=False, env=env, timeout=300)
        records = sorted(results.glob("*.json"))
        result = json.loads(records[-1].read_text(encoding="utf-8")) if records else {}
        argv_file = tmp_path / "argv"
        argv = argv_file.read_text(encoding="utf-8").splitlines() if argv_file.exists() else []
        for record in records:
            record.unlink()
        return done, " ".join(done.stdout.replace("''", "'").split()), result, argv

    return run


def test_all_reduce_perf_run_is_accepted_and_recorded(play):
    done, out, result, argv = play(
        "nccl-tests-all_reduce.mpi-tag-output.txt",
        "-e",
        json.dumps(
            {"nccl_acceptance_benchmark": "all_reduce_perf", "nccl_acceptance_srun_args": ["--mpi=pmix"]}
        ),
    )
    assert done.returncode == 0, out[-2000:]
    assert result["verdict"] == "accepted" and result["all_nodes_gbps"] == 348.16
    output = result["measurements"][0]["output"]
    assert (output["prefix"], output["avg_busbw_gbps"], len(output["rows"])) == ("mpi-tag-output", 164.42, 11)
    assert "--mpi=pmix" in argv and "--ntasks-per-node=8" in argv and "--label" in argv
    assert argv[-1] == "exec all_reduce_perf -b 1M -e 1G -f 2 -g 1 -c 1"


def test_the_default_benchmark_launches_through_training_job(play, tmp_path):
    """The test case's all-node run is a training_job launch; where it cannot even start (no Slurm on this
    host: training_job's own check of the partition fails), the play says so and runs no search.

    The Python given has torch: the plan finds the case's lock for the host's OS (Debian 12, the CUDA
    containers' target) and would otherwise refuse a Python without the torch it pins, before the partition.
    """
    done, out, result, argv = play(
        "collectives.srun-label.txt",
        *("-e", "nccl_acceptance_threshold_gbps=0.2", "-e", f"nccl_acceptance_python={sys.executable}"),
    )
    assert done.returncode != 0 and result == {} and argv == []
    assert "nccl_acceptance: the all-node job could not be launched" in out and "sinfo" in out
    assert (
        "TASK [trainstack.cluster.training_job : Check the request and plan the launch (on the controller)]"
        in done.stdout
    )


def test_a_given_command_runs_through_srun_and_a_missing_summary_is_a_cut_run(play, tmp_path):
    case = tmp_path / "shared/collectives"
    command = f"cd {case} && exec python3 collectives.py --ops all_reduce --summary-json {{summary}}"
    done, out, result, argv = play(
        "collectives.srun-label.txt", "-e", json.dumps({"nccl_acceptance_command": command})
    )
    # The stand-in writes no summary: the play must call the run cut short, not slow.
    assert done.returncode != 0 and result["verdict"] == "unparsable"
    assert "cannot be judged (unparsable), so no node is blamed" in out
    assert "truncated run: the command did not write its summary" in out
    assert (
        "collectives.py --ops all_reduce" in argv[-1]
        and (tmp_path / "shared/collectives/collectives.py").is_file()
    )


@pytest.mark.parametrize(
    ("fixture", "verdict", "message"),
    [
        (
            "nccl-tests-all_reduce.no-check.txt",
            "unchecked",
            "did not check its results: 1048576 B out-of-place",
        ),
        (
            "nccl-tests-all_reduce.wrong.txt",
            "wrong_results",
            "all_reduce returned wrong elements across 2 nodes",
        ),
    ],
)
def test_each_verdict_fails_with_its_reason(play, fixture, verdict, message):
    done, out, result, _ = play(fixture, "-e", "nccl_acceptance_benchmark=all_reduce_perf")
    assert done.returncode == 2 and result["verdict"] == verdict and result["slow"] == []
    assert message in out and "GB/s across 2 nodes is below" not in out


def test_below_the_floor_still_fails_as_before(play):
    done, out, result, _ = play(
        "nccl-tests-all_reduce.txt",
        "-e",
        "nccl_acceptance_benchmark=all_reduce_perf",
        "-e",
        "nccl_acceptance_threshold_gbps=400",
    )
    assert done.returncode == 2 and result["verdict"] == "slow"
    assert "bus bandwidth 348.16 GB/s across 2 nodes is below 400 GB/s" in out


def test_a_failed_job_is_reported_as_failed_not_slow(play):
    done, out, result, _ = play(
        "nccl-tests-all_reduce.nccl-failure.txt", "-e", "nccl_acceptance_benchmark=all_reduce_perf", rc=1
    )
    assert done.returncode == 2 and result["verdict"] == "failed" and result["slow"] == []
    assert "The all_reduce_perf job across 2 nodes failed: RuntimeError: srun rc=1" in out
    assert "GB/s across 2 nodes is below" not in out
