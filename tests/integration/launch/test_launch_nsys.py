"""launch_training's Nsight Systems option on the lab: only the chosen ranks run under nsys, their reports
come back with the log, and a request that cannot be profiled submits nothing.

nsys itself is a named stand-in here (standin_nsys.sh: NVIDIA's tools are unreachable and the lab has no GPU);
the training job, torchrun, Slurm and the wrapper are the real ones.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support import on_lab_node

from .conftest import SHARED, fsdp_on_both_nodes, launch, nothing_submitted, results_dir

pytestmark = pytest.mark.lab
COMPUTE = ["10.77.0.12", "10.77.0.13"]


@pytest.fixture
def standin_nsys(lab_ready: None):
    shutil.copy(Path(__file__).with_name("standin_nsys.sh"), SHARED / "standin-nsys")
    for address in COMPUTE:
        on_lab_node("install -m 0755 /shared/standin-nsys /usr/local/bin/nsys", address)
    try:
        yield
    finally:
        for address in COMPUTE:
            on_lab_node("rm -f /usr/local/bin/nsys", address, check=False)


def test_only_the_chosen_rank_is_profiled_and_its_report_fetched(standin_nsys: None) -> None:
    name = f"it-nsys-{os.getpid()}"
    proc = launch(
        *fsdp_on_both_nodes(name, "-e", '{"training_job_nsys_ranks": [1], "training_job_nsys_delay": 2}')
    )
    out = results_dir(proc.stdout)
    assert sorted(p.name for p in (out / "nsys").iterdir()) == ["rank1.nsys-rep"]
    report = json.loads((out / "nsys" / "rank1.nsys-rep").read_text())
    assert report["rank"] == "1"
    assert report["options"][:3] == ["--trace=cuda,nvtx,osrt", "--sample=none", "--cpuctxsw=none"]
    assert "--delay=2" in report["options"] and "--force-overwrite=true" in report["options"]
    assert report["options"][-2].endswith("/nsys/rank1")
    assert report["command"][0].endswith("/bin/python") and report["command"][1].endswith("/train.py")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["final_loss"] < summary["first_loss"]
    assert "profiles       nsys/rank1.nsys-rep" in proc.stdout


@pytest.mark.parametrize(
    ("ranks", "message"),
    [
        ("[0]", "no nsys on PATH"),
        ("[2]", "must be global ranks below the world size 2"),
    ],
    ids=["nsys-missing", "rank-outside-world"],
)
def test_unprofilable_request_submits_nothing(lab_ready: None, ranks: str, message: str) -> None:
    name = f"it-nsys-bad-{os.getpid()}"
    request = f'{{"training_job_nsys_ranks": {ranks}}}'
    proc = launch(*fsdp_on_both_nodes(name, "-e", request), check=False)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr
    assert nothing_submitted(name)
