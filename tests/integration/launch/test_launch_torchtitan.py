"""launch_training on the lab with torchtitan/llama: torchtitan's FSDP2 across two Slurm nodes (gloo, CPU),
its virtualenv built from the slow wheelhouse, pytorch/fsdp's metric lines parsed into the results table, and
the test case's own rules refusing a tensor-parallel degree the heads do not allow before anything is
submitted. Slow: the first launch copies the slow wheelhouse (about 600 MB) and builds a virtualenv from it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from .conftest import launch, nothing_submitted, results_dir, slow_case_on_both_nodes

pytestmark = [pytest.mark.lab, pytest.mark.slow]
SLOW_WHEELHOUSE = Path(".cache/wheelhouse-slow").resolve()


@pytest.fixture(scope="module")
def slow_wheelhouse(lab_ready: None) -> Path:
    subprocess.run(["make", "wheelhouse-slow"], check=True, capture_output=True)
    return SLOW_WHEELHOUSE


def titan_on_both_nodes(name: str, wheelhouse: Path, *extra: str) -> list[str]:
    return slow_case_on_both_nodes("torchtitan/llama", name, wheelhouse, *extra)


def test_torchtitan_fsdp_on_two_nodes(slow_wheelhouse: Path) -> None:
    name = f"it-titan-{os.getpid()}"
    proc = launch(*titan_on_both_nodes(name, slow_wheelhouse))
    out = results_dir(proc.stdout)
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["testcase"], summary["world_size"], summary["nodes"], summary["fsdp"]) == (
        "torchtitan/llama",
        2,
        2,
        2,
    )
    assert summary["final_loss"] < summary["first_loss"] - 0.5, summary["losses"]
    assert "test case      torchtitan/llama (tiny), 2 node(s), world size 2, cpu" in proc.stdout
    assert "COMPLETED on ts-compute1,ts-compute2" in proc.stdout
    assert (out / "job.log").read_text().count("TRAINSTACK_METRIC") == summary["steps"]


def test_a_degree_the_heads_refuse_submits_nothing(slow_wheelhouse: Path) -> None:
    name = f"it-titan-tp-{os.getpid()}"
    proc = launch(
        *titan_on_both_nodes(name, slow_wheelhouse, "-e", '{"training_job_args": {"tp": 3}}'), check=False
    )
    assert proc.returncode != 0
    assert (
        "torchtitan/llama refuses these arguments for 2 process(es) (2 node(s) x 1): "
        "--tp 3 must divide tiny's attention heads"
    ) in proc.stdout + proc.stderr
    assert nothing_submitted(name)
