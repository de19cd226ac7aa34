"""training_job's Nsight Systems wrapper, rendered from the role's template and run: the listed global ranks
exec `nsys profile` with the options and the per-rank output, every other rank execs its command unwrapped.

`nsys` is the lab tests' named stand-in (tests/integration/launch/standin_nsys.sh), which records how it was
called; the wrapper and the commands it runs are real.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from tests.support import REPO

TEMPLATE = REPO / "roles" / "training_job" / "templates" / "nsys-wrap.sh.j2"
STANDIN = REPO / "tests" / "integration" / "launch" / "standin_nsys.sh"


def render(tmp_path: Path, **overrides: object) -> Path:
    variables = {
        "ansible_managed": "managed by test",
        "training_job_nsys_ranks": [1, 3],
        "training_job_nsys_args": "--trace=cuda,nvtx --sample=none",
        "training_job_nsys_delay": 0,
        "training_job_nsys_duration": 0,
        "training_job_nsys_bin": "nsys",
        **overrides,
    }
    text = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(TEMPLATE.read_text()))
    wrapper = tmp_path / "run" / "nsys-wrap.sh"
    wrapper.parent.mkdir()
    wrapper.write_text(text)
    wrapper.chmod(0o755)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shutil.copy(STANDIN, bindir / "nsys")
    return wrapper


def run_rank(wrapper: Path, rank: int, *command: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RANK": str(rank), "PATH": f"{wrapper.parent.parent / 'bin'}:{os.environ['PATH']}"}
    return subprocess.run([str(wrapper), *command], env=env, capture_output=True, text=True, check=False)


def test_listed_ranks_run_under_nsys_with_their_own_report(tmp_path: Path) -> None:
    wrapper = render(tmp_path)
    for rank in range(4):
        proc = run_rank(wrapper, rank, "sh", "-c", "echo ran as $RANK")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == f"ran as {rank}"
    reports = sorted(p.name for p in (wrapper.parent / "nsys").iterdir())
    assert reports == ["rank1.nsys-rep", "rank3.nsys-rep"]
    record = json.loads((wrapper.parent / "nsys" / "rank3.nsys-rep").read_text())
    assert record["rank"] == "3"
    assert record["options"] == [
        "--trace=cuda,nvtx",
        "--sample=none",
        f"--output={wrapper.parent}/nsys/rank3",
        "--force-overwrite=true",
    ]
    assert record["command"] == ["sh", "-c", "echo ran as $RANK"]


def test_capture_window_and_exit_status_pass_through(tmp_path: Path) -> None:
    wrapper = render(tmp_path, training_job_nsys_delay=30, training_job_nsys_duration=20)
    proc = run_rank(wrapper, 1, "sh", "-c", "exit 7")
    assert proc.returncode == 7
    record = json.loads((wrapper.parent / "nsys" / "rank1.nsys-rep").read_text())
    assert "--delay=30" in record["options"] and "--duration=20" in record["options"]
    assert run_rank(wrapper, 0, "sh", "-c", "exit 5").returncode == 5


@pytest.mark.parametrize("rank", ["", None])
def test_without_rank_it_refuses_to_guess(tmp_path: Path, rank: str | None) -> None:
    wrapper = render(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "RANK"}
    if rank is not None:
        env["RANK"] = rank
    proc = subprocess.run([str(wrapper), "true"], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "torchrun sets RANK" in proc.stderr
