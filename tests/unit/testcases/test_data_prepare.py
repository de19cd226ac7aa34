"""data/prepare: the options' rules and the filesystem checks the launcher runs with ``--validate-only true``
(each refusal names the input, and nothing is written), and the job itself on two gloo ranks (torchrun): each
rank writes its shards, rank 0 writes the manifest once all are complete, the bytes are those one process
writes, and a relaunch skips what is complete (slow: two torchrun launches, about 20 s each on a busy host).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from data_prepare.config import PrepareConfig, option_problems, parse_args, problems
from trainstack_train import prepare as prep

from tests.unit.testcases.case_runs import LIBRARY
from tests.unit.testcases.conftest import DATA_PREPARE_DIR

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "corpus" / "kjv-genesis-1-12.jsonl"
ENTRY = DATA_PREPARE_DIR / "prepare.py"


def entry(*argv: str, cwd: Path, torchrun: int = 0) -> subprocess.CompletedProcess:
    """The entrypoint as the launcher starts it: from its directory with the library beside it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(DATA_PREPARE_DIR), str(LIBRARY)])}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    start = [sys.executable, str(ENTRY)]
    if torchrun:
        start = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={torchrun}",
        ]
        start.append(str(ENTRY))
    return subprocess.run([*start, *argv], cwd=cwd, env=env, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    prep.train_tokenizer([SAMPLE], path, 512)
    return path


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--output", "/o"], "--input is required"),
        (["--input", "/i"], "--output is required"),
        (
            ["--input", "gs://bucket/corpus/", "--output", "/o"],
            "--input gs://bucket/corpus/: only s3:// object storage is read",
        ),
        (
            ["--input", "/i", "--output", "S3://b/out"],
            "--output S3://b/out: writing or reading object storage is not supported here",
        ),
        (
            ["--input", "/i", "--output", "/o", "--tokenizer", "s3://b/tokenizer.json"],
            "--tokenizer s3://b/tokenizer.json: writing or reading object storage is not supported here",
        ),
        (["--input", "/i", "--output", "/o", "--num-shards", "0"], "--num-shards 0: at least 1"),
        (["--input", "/i", "--output", "/o", "--vocab-size", "100"], "--vocab-size 100: at least 258"),
        (
            ["--input", "/i", "--output", "/o", "--checkpoint-every", "5"],
            "a preparation keeps no checkpoint, it resumes per shard",
        ),
    ],
    ids=[
        "no-input",
        "no-output",
        "gs-input",
        "s3-output",
        "s3-tokenizer",
        "no-shards",
        "small-vocab",
        "checkpoint",
    ],
)
def test_the_options_are_refused_by_name(argv: list[str], expected: str) -> None:
    found = option_problems(parse_args(argv))
    assert len(found) == 1 and expected in found[0], found


def test_an_s3_input_passes_the_option_rules() -> None:
    """Read through trainstack_train.storage (tests/unit/testcases/test_prepare_s3.py, on moto)."""
    assert option_problems(parse_args(["--input", "s3://bucket/corpus/", "--output", "/o"])) == []


def test_the_manifest_defaults_with_a_corpus_and_an_output_hold() -> None:
    cfg = parse_args(["--input", str(SAMPLE), "--output", "/nonexistent/out"])
    assert (cfg.tokenizer, cfg.trains_tokenizer, cfg.num_shards) == ("train", True, 8)
    assert problems(cfg, {}) == []


def test_a_missing_tokenizer_is_named(tmp_path: Path) -> None:
    cfg = PrepareConfig(input=str(SAMPLE), output=str(tmp_path / "o"), tokenizer=str(tmp_path / "nope.json"))
    assert problems(cfg, {}) == [
        f"--tokenizer {tmp_path / 'nope.json'}: no such file (a Hugging Face tokenizer.json)"
    ]


@pytest.mark.parametrize("trains", [True, False], ids=["train", "tokenizer"])
def test_a_corpus_without_documents_is_named(tmp_path: Path, tokenizer: Path, trains: bool) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "a.jsonl").write_text('{"text": ""}\n\n')
    (empty / "b.txt").write_text("")
    cfg = PrepareConfig(
        input=str(empty), output=str(tmp_path / "o"), tokenizer="train" if trains else str(tokenizer)
    )
    assert problems(cfg, {}) == [f"input {empty}: no documents (every text is empty)"]


def test_an_output_of_another_preparation_is_refused(tmp_path: Path, tokenizer: Path) -> None:
    out = tmp_path / "out"
    prep.prepare([SAMPLE], out, tokenizer, num_shards=2)
    cfg = PrepareConfig(input=str(SAMPLE), output=str(out), tokenizer=str(tokenizer), num_shards=3)
    [message] = problems(cfg, {})
    assert message.startswith(
        f"--output {out}: holds shards of another plan (manifest.json differs in num_shards"
    )


def test_validate_only_refuses_before_anything_is_written(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"text": ""}\n')
    out = tmp_path / "out"
    proc = entry("--input", str(empty), "--output", str(out), "--validate-only", "true", cwd=DATA_PREPARE_DIR)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"prepare.py: error: input {empty}: no documents (every text is empty)"
    )
    assert not out.exists()
    ok = entry("--input", str(SAMPLE), "--output", str(out), "--validate-only", "true", cwd=DATA_PREPARE_DIR)
    assert ok.returncode == 0, ok.stderr
    assert "data/prepare: the arguments hold for 1 process(es)" in ok.stdout and not out.exists()


def metric_lines(stdout: str) -> list[dict]:
    return [
        json.loads(line.split("TRAINSTACK_METRIC ", 1)[1])
        for line in stdout.splitlines()
        if "METRIC " in line
    ]


@pytest.mark.slow
def test_two_ranks_write_their_shards_and_rank_0_the_manifest(tmp_path: Path, tokenizer: Path) -> None:
    out, summary = tmp_path / "out", tmp_path / "summary.json"
    argv = ["--input", str(SAMPLE), "--output", str(out), "--tokenizer", str(tokenizer), "--num-shards", "5"]
    proc = entry(*argv, "--summary-json", str(summary), cwd=tmp_path, torchrun=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    body = json.loads(summary.read_text())
    assert [(r["rank"], r["written"], r["skipped"]) for r in body["ranks"]] == [
        (0, [0, 2, 4], []),
        (1, [1, 3], []),
    ]
    assert sorted((m["shard"], m["rank"]) for m in metric_lines(proc.stdout)) == [
        (0, 0), (1, 1), (2, 0), (3, 1), (4, 0)
    ]  # fmt: skip
    manifest = json.loads((out / "manifest.json").read_text())
    assert (body["corpus"]["documents"], body["corpus"]["shards"]) == (manifest["documents"], 5)
    assert body["corpus"]["tokenizer"]["source"] == str(tokenizer)
    # One process writes the same bytes.
    alone = prep.prepare([SAMPLE], tmp_path / "alone", tokenizer, num_shards=5)
    assert alone.manifest is not None and alone.manifest["shards"] == manifest["shards"]
    # A relaunch finds every shard complete and writes nothing; one missing shard is the only one written.
    for suffix in (".bin", ".idx", ".json"):
        (out / f"shard-00003{suffix}").unlink()
    again = entry(*argv, "--summary-json", str(summary), cwd=tmp_path, torchrun=2)
    assert again.returncode == 0, again.stderr[-3000:]
    body = json.loads(summary.read_text())
    assert [(r["written"], r["skipped"]) for r in body["ranks"]] == [([], [0, 2, 4]), ([3], [1])]
    assert json.loads((out / "manifest.json").read_text()) == manifest


def test_without_the_manifest_step_no_worker_writes_one(tmp_path: Path, tokenizer: Path) -> None:
    """The job's ranks leave manifest.json to rank 0 after the barrier, even the one that finishes last."""
    out = tmp_path / "out"
    first = prep.prepare([SAMPLE], out, tokenizer, num_shards=2, worker=(0, 2), manifest=False)
    last = prep.prepare([SAMPLE], out, tokenizer, num_shards=2, worker=(1, 2), manifest=False)
    assert (first.written, last.written, last.manifest) == ([0], [1], None)
    assert not (out / "manifest.json").exists()
    assert last.plan is not None and prep.write_manifest(out, last.plan) is not None
