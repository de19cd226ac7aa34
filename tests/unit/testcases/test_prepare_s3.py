"""Preparing a corpus straight from an S3 prefix (``--input s3://bucket/prefix``), against a real moto server.

The objects are listed and streamed through s3torchconnector's client exactly as against AWS; only the
endpoint differs (``AWS_ENDPOINT_URL_S3``). What counts: the shards equal, byte for byte, the shards of the
same files prepared from disk; the manifest records the URI and each object's size and ETag; a rerun skips
the complete shards; a bad URI, a missing bucket or an empty prefix is refused before anything is written.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from data_prepare.config import PrepareConfig, problems
from data_prepare.job import run
from trainstack_train import prepare as prep

from tests.unit.testcases.case_runs import LIBRARY
from tests.unit.testcases.conftest import DATA_PREPARE_DIR

pytest.importorskip("s3torchconnector")
pytestmark = pytest.mark.moto

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "corpus" / "kjv-genesis-1-12.jsonl"
# Names whose order by path segment ("a/b" before "a-c") is not their order as strings ("a-c" before
# "a/b", since "-" < "/"): S3 lists in string order, the disk is read in path order.
NAMES = ("a-c.jsonl", "a/b.jsonl", "a/z.txt", "m.jsonl.gz", "n/o/p.txt.gz")
VERSES = len(SAMPLE.read_text(encoding="utf-8").splitlines())
# A JSONL line is a document, a whole text file is one: the verses of the three JSONL files, two texts.
DOCUMENTS = sum(len(range(i, VERSES, len(NAMES))) for i, n in enumerate(NAMES) if ".jsonl" in n) + 2


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    prep.train_tokenizer([SAMPLE], path, 512)
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample split into JSONL, gzipped JSONL and text files in nested directories, plus a hidden file
    that preparation skips (on disk and on S3 alike)."""
    root = tmp_path_factory.mktemp("corpus") / "kjv"
    lines = SAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)
    parts = [lines[i :: len(NAMES)] for i in range(len(NAMES))]
    for name, part in zip(NAMES, parts, strict=True):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        body = "".join(part) if ".jsonl" in name else "".join(json.loads(line)["text"] for line in part)
        data = body.encode("utf-8")
        path.write_bytes(gzip.compress(data, mtime=0) if name.endswith(".gz") else data)
    (root / ".hidden").mkdir()
    (root / ".hidden" / "skipped.jsonl").write_text('{"text": "never read"}\n')
    return root


def upload(client, bucket: str, root: Path, prefix: str) -> dict[str, str]:
    """Every file under ``root`` to ``prefix/<relative path>``; their ETags by relative name."""
    etags = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        name = path.relative_to(root).as_posix()
        reply = client.put_object(Bucket=bucket, Key=f"{prefix}/{name}", Body=path.read_bytes())
        etags[name] = reply["ETag"]
    return etags


def shard_bytes(directory: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes() for p in sorted(directory.glob("shard-*.*")) if p.suffix in (".bin", ".idx")
    }


def test_shards_from_an_s3_prefix_equal_the_shards_of_the_same_files_on_disk(
    bucket, corpus: Path, tokenizer: Path, tmp_path: Path
) -> None:
    client, name = bucket
    etags = upload(client, name, corpus, "corpora/kjv")
    # A sibling whose key starts with the prefix's letters is not under the prefix-as-directory.
    client.put_object(Bucket=name, Key="corpora/kjv-old/x.jsonl", Body=b'{"text": "not this one"}\n')
    uri = f"s3://{name}/corpora/kjv/"
    disk = prep.prepare([corpus], tmp_path / "disk", tokenizer, num_shards=3)
    s3 = prep.prepare([uri], tmp_path / "s3", tokenizer, num_shards=3)
    assert disk.manifest is not None and s3.manifest is not None
    assert len(shard_bytes(tmp_path / "s3")) == 6
    assert shard_bytes(tmp_path / "s3") == shard_bytes(tmp_path / "disk")
    assert s3.manifest["plan"] == disk.manifest["plan"]
    assert (s3.manifest["documents"], s3.manifest["shards"]) == (
        disk.manifest["documents"],
        disk.manifest["shards"],
    )
    assert s3.manifest["documents"] == DOCUMENTS
    order = ["a/b.jsonl", "a/z.txt", "a-c.jsonl", "m.jsonl.gz", "n/o/p.txt.gz"]
    assert s3.manifest["source"] == {
        "inputs": [uri],
        "files": [{"name": n, "size": (corpus / n).stat().st_size, "etag": etags[n]} for n in order],
    }
    assert disk.manifest["source"] == {
        "inputs": [str(corpus)],
        "files": [{"name": n, "size": (corpus / n).stat().st_size} for n in order],
    }


def test_a_rerun_from_s3_writes_only_the_missing_shard(bucket, corpus: Path, tokenizer: Path, tmp_path: Path):
    client, name = bucket
    upload(client, name, corpus, "kjv")
    out = tmp_path / "out"
    first = prep.prepare([f"s3://{name}/kjv"], out, tokenizer, num_shards=3)
    manifest = (out / "manifest.json").read_bytes()
    for suffix in (".bin", ".idx", ".json"):
        (out / f"shard-00001{suffix}").unlink()
    again = prep.prepare([f"s3://{name}/kjv"], out, tokenizer, num_shards=3)
    assert (first.written, again.written, again.skipped) == ([0, 1, 2], [1], [0, 2])
    assert (out / "manifest.json").read_bytes() == manifest


def test_one_object_named_by_its_uri_is_the_corpus(bucket, corpus: Path, tokenizer: Path, tmp_path: Path):
    client, name = bucket
    upload(client, name, corpus, "kjv")
    alone = prep.prepare([f"s3://{name}/kjv/a/b.jsonl"], tmp_path / "s3", tokenizer)
    local = prep.prepare([corpus / "a" / "b.jsonl"], tmp_path / "disk", tokenizer)
    assert shard_bytes(tmp_path / "s3") == shard_bytes(tmp_path / "disk")
    assert alone.manifest is not None and local.manifest is not None
    assert alone.manifest["plan"] == local.manifest["plan"]
    assert [f["name"] for f in alone.manifest["source"]["files"]] == ["b.jsonl"]


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://Bad_Bucket/kjv", "input 's3://Bad_Bucket/kjv': 'Bad_Bucket' is not a valid S3 bucket name"),
        ("s3://{bucket}//kjv", "has an empty, '.' or '..' path segment"),
        ("s3://no-such-bucket-here/kjv", "input s3://no-such-bucket-here/kjv: cannot list the bucket: "),
        ("s3://{bucket}/nothing-here", "input s3://{bucket}/nothing-here: no objects under this prefix"),
        ("s3://{bucket}/hidden", "input s3://{bucket}/hidden: no objects under this prefix"),
        ("s3://{bucket}/odd", "input s3://{bucket}/odd/data.csv: unknown file type"),
    ],
    ids=["bad-name", "empty-segment", "no-bucket", "empty-prefix", "only-hidden", "unknown-type"],
)
def test_bad_s3_input_is_refused_before_anything_is_written(
    bucket, tokenizer: Path, tmp_path: Path, uri: str, expected: str
) -> None:
    client, name = bucket
    client.put_object(Bucket=name, Key="hidden/.cache/a.jsonl", Body=b'{"text": "x"}\n')
    client.put_object(Bucket=name, Key="hidden/", Body=b"")  # a console's "folder"
    client.put_object(Bucket=name, Key="odd/data.csv", Body=b"a,b\n")
    uri, expected = uri.format(bucket=name), expected.format(bucket=name)
    out = tmp_path / "out"
    with pytest.raises(prep.PrepareError) as refused:
        prep.prepare([uri], out, tokenizer)
    assert expected in str(refused.value)
    # The launcher's check (--validate-only) says the same, with the job's environment.
    cfg = PrepareConfig(input=uri, output=str(out), tokenizer=str(tokenizer))
    [message] = problems(cfg, os.environ)
    assert expected in message
    assert not out.exists()


def test_s3_input_needs_the_region_and_names_it(bucket, tokenizer: Path, tmp_path: Path) -> None:
    _client, name = bucket
    environ = {k: v for k, v in os.environ.items() if k not in ("AWS_REGION", "AWS_DEFAULT_REGION")}
    cfg = PrepareConfig(input=f"s3://{name}/kjv", output=str(tmp_path / "out"), tokenizer=str(tokenizer))
    assert problems(cfg, environ) == [
        f"input s3://{name}/kjv needs the bucket's region in AWS_REGION (or AWS_DEFAULT_REGION)"
    ]


def test_the_job_prepares_an_s3_prefix_with_a_trained_tokenizer(bucket, corpus: Path, tmp_path: Path) -> None:
    """data/prepare itself (one process): --tokenizer train reads the objects too, the manifest records
    them, and --validate-only on the submit host accepts the prefix and refuses a missing bucket by name."""
    client, name = bucket
    upload(client, name, corpus, "kjv")
    uri, out = f"s3://{name}/kjv", tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(DATA_PREPARE_DIR), str(LIBRARY)])}
    for key in ("RANK", "WORLD_SIZE"):
        env.pop(key, None)

    def validate(given: str) -> subprocess.CompletedProcess:
        argv = ["--input", given, "--output", str(out), "--validate-only", "true"]
        return subprocess.run(
            [sys.executable, str(DATA_PREPARE_DIR / "prepare.py"), *argv],
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )  # fmt: skip

    ok = validate(uri)
    assert ok.returncode == 0, ok.stderr
    refused = validate("s3://no-such-bucket-here/kjv")
    assert refused.returncode == 2
    assert "error: input s3://no-such-bucket-here/kjv: cannot list the bucket" in refused.stderr
    assert not out.exists()
    cfg = PrepareConfig(input=uri, output=str(out), vocab_size=300, num_shards=2)
    assert run(cfg) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["source"]["inputs"] == [uri] and len(manifest["source"]["files"]) == len(NAMES)
    assert manifest["documents"] == DOCUMENTS
