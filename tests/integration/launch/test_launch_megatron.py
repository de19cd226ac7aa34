"""launch_training on the lab with megatron/gpt's preflight: megatron-core cannot take a step without CUDA,
so on the lab's two CPU nodes (torchrun, gloo) the test case runs what comes before its first CUDA-only call
on both ranks (parallel groups, the model on CPU and on the meta device, the micro-batches, the checkpoint
round trip in the job's checkpoint directory, the ranks' agreement), and the results show a preflight, never
a training result; a tensor-parallel degree the heads do not allow is refused before anything is submitted.
Slow: the first launch copies the slow wheelhouse and builds a virtualenv from it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from .conftest import SHARED, launch, nothing_submitted, results_dir, slow_case_on_both_nodes

pytestmark = [pytest.mark.lab, pytest.mark.slow]
SLOW_WHEELHOUSE = Path(".cache/wheelhouse-slow").resolve()
CHECKS = [
    "parallel_groups",
    "model_cpu",
    "model_meta_llama3_2_1b",
    "model_meta_llama3_1_8b",
    "data",
    "checkpoint_round_trip",
    "ranks_agree",
]


@pytest.fixture(scope="module")
def slow_wheelhouse(lab_ready: None) -> Path:
    subprocess.run(["make", "wheelhouse-slow"], check=True, capture_output=True)
    return SLOW_WHEELHOUSE


def megatron_on_both_nodes(name: str, wheelhouse: Path, args: dict) -> list[str]:
    return slow_case_on_both_nodes(
        "megatron/gpt",
        name,
        wheelhouse,
        "-e",
        "training_job_checkpoint_every=1",
        "-e",
        json.dumps({"training_job_args": args}),
    )


def test_the_preflight_runs_on_two_cpu_nodes_and_shows_as_one(slow_wheelhouse: Path) -> None:
    name = f"it-megatron-{os.getpid()}"
    proc = launch(*megatron_on_both_nodes(name, slow_wheelhouse, {"preflight": "true"}))
    out = results_dir(proc.stdout)
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["testcase"], summary["preflight"], summary["passed"]) == ("megatron/gpt", True, True)
    assert (summary["world_size"], summary["nodes"], summary["device"], summary["dp"]) == (2, 2, "cpu", 2)
    assert [check["name"] for check in summary["checks"]] == CHECKS
    for check in summary["checks"]:
        assert (check["passed"], check["skipped"], check["passed_ranks"], check["failed"]) == (
            True,
            False,
            [0, 1],
            {},
        ), check
    by_name = {check["name"]: check["detail"] for check in summary["checks"]}
    assert "164,160 parameters built on CPU (pytorch/fsdp's count 164,160)" in by_name["model_cpu"]
    assert "8,030,261,248 parameters on the meta device" in by_name["model_meta_llama3_1_8b"]
    assert (
        "equal after load True; files there ['rank-00000.pt', 'rank-00001.pt']"
        in by_name["checkpoint_round_trip"]
    )
    assert summary["first_cuda_call"].startswith("megatron.core.distributed.DistributedDataParallel")
    assert summary["stops_before"].startswith("megatron-core 0.16.1 trains on CUDA only")
    rates = ("tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "first_loss", "final_loss")
    assert [summary[key] for key in rates] == [None] * len(rates) and summary["steps"] == 0
    log = (out / "job.log").read_text()
    assert "TRAINSTACK_METRIC" not in log and "megatron/gpt preflight: every check passed" in log
    assert "test case      megatron/gpt (tiny), 2 node(s), world size 2, cpu" in proc.stdout
    assert "preflight      7/7 checks passed on every rank; no training step, no throughput" in proc.stdout
    assert "tokens/s" not in proc.stdout and "TFLOP/s/GPU" not in proc.stdout
    assert "COMPLETED on ts-compute1,ts-compute2" in proc.stdout
    # The round trip cleaned up after itself: nothing a later training run could resume from.
    checkpoints = SHARED / "trainstack" / "checkpoints" / name
    assert not checkpoints.exists() or list(checkpoints.iterdir()) == []


def test_a_degree_the_heads_refuse_submits_nothing(slow_wheelhouse: Path) -> None:
    name = f"it-megatron-tp-{os.getpid()}"
    proc = launch(*megatron_on_both_nodes(name, slow_wheelhouse, {"preflight": "true", "tp": 3}), check=False)
    assert proc.returncode != 0
    assert (
        "megatron/gpt refuses these arguments for 2 process(es) (2 node(s) x 1): "
        "--tp 3 must divide tiny's attention heads"
    ) in proc.stdout + proc.stderr
    assert nothing_submitted(name)
