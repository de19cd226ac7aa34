"""Running a test case's entrypoint from the CPU tests: its Python, its run on CPU, its metric lines.

Shared by the tests of the cases that live in the slow wheelhouse (their dependencies are too large for the
default one), which each start their entrypoint the way the launcher does and read what it printed.
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

SLOW_WHEELHOUSE = REPO / ".cache" / "wheelhouse-slow"
# The test cases' shared training library (trainstack_train): staged, it lies beside a case's train.py; a
# process the tests start from the repository finds it through PYTHONPATH (see conftest.py).
LIBRARY = REPO / "testcases" / "common"
METRIC_PREFIX = "TRAINSTACK_METRIC "


def slow_python(variable: str, manifest: dict, lock: Path | None = None, needs: str = ".stamp") -> str:
    """A Python with a slow-wheelhouse test case's requirements: ``$variable``, else a virtualenv built from
    the slow wheelhouse as the launcher builds one (``pip install --no-index`` of the manifest's pins, or of
    its hashed ``lock``), kept under .cache/venvs by the pins' hash so a second session reuses it.
    """
    given = os.environ.get(variable)
    if given:
        return given
    if not list(SLOW_WHEELHOUSE.glob(needs)):
        pytest.fail(f"{manifest['name']} needs the slow wheelhouse ({needs}): run make wheelhouse-slow")
    if lock is None:
        pins = manifest["requirements"]
        key = hashlib.sha256("\n".join(sorted(pins)).encode()).hexdigest()[:16]
        install, record = list(pins), "\n".join(pins) + "\n"
    else:
        key = hashlib.sha256(lock.read_bytes()).hexdigest()[:16]
        install, record = ["--require-hashes", "-r", str(lock)], lock.read_text()
    venv = REPO / ".cache" / "venvs" / f"{manifest['name'].replace('/', '-')}-{key}"
    if not (venv / ".complete").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(venv / "bin" / "pip"), "install", "-q", "--no-index", "--find-links", str(SLOW_WHEELHOUSE)]
        subprocess.run([*pip, *install], check=True)
        (venv / ".complete").write_text(record)
    return str(venv / "bin" / "python")


def metric_lines(stdout: str) -> list[dict]:
    """The ``TRAINSTACK_METRIC`` records a run printed, in order."""
    return [
        json.loads(line.removeprefix(METRIC_PREFIX))
        for line in stdout.splitlines()
        if line.startswith(METRIC_PREFIX)
    ]


def run_on_cpu(python: str, entry: Path, summary: Path, *args: str, procs: int = 1) -> dict:
    """A test case's entrypoint on CPU (torchrun for several processes); its summary with its metric lines
    (``lines``) and what it wrote to stderr (``stderr``)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    env.pop("WORLD_SIZE", None)
    launcher = [python] if procs == 1 else [python, "-m", "torch.distributed.run", "--standalone"]
    launcher += [] if procs == 1 else [f"--nproc-per-node={procs}"]
    proc = subprocess.run(
        [*launcher, str(entry), "--device", "cpu", *args, "--summary-json", str(summary)],
        capture_output=True, text=True, env=env, timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {**json.loads(summary.read_text()), "lines": metric_lines(proc.stdout), "stderr": proc.stderr}


def imported_modules(
    *argv: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess, set]:
    """Run Python with ``-X importtime``; the modules it imported (what ``--validate-only`` may not need)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, env=env, check=False
    )
    names = {
        line.rsplit("|", 1)[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    return proc, names


def prepared_corpus(directory: Path, num_shards: int = 2) -> Path:
    """The shipped sample (tests/data/corpus) prepared into ``directory/kjv`` with a 400-id BPE trained on it
    (the tiny shape's 512-id vocabulary holds it): what a case trains on with ``--data``."""
    from trainstack_train import prepare

    sample = REPO / "tests" / "data" / "corpus" / "kjv-genesis-1-12.jsonl"
    prepare.train_tokenizer([sample], directory / "tokenizer.json", vocab_size=400)
    prepare.prepare([sample], directory / "kjv", directory / "tokenizer.json", num_shards=num_shards)
    return directory / "kjv"
