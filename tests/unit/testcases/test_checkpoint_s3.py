"""pytorch/fsdp's checkpoints on S3 (``--checkpoint-dir s3://bucket/prefix``), against a real moto server.

The run goes through s3torchconnector's DCP plugins and client exactly as against AWS; only the endpoint
differs, set the way AWS's SDKs read it (``AWS_ENDPOINT_URL_S3``). One-rank gloo runs in this process with
FSDP2 on (``--fsdp true``), as the local checkpoint tests do.
"""

import os
import subprocess
import sys

import pytest
from jax_llama.config import parse_args as jax_parse_args
from trainstack_train import checkpoint
from trainstack_train.config import TrainConfig
from trainstack_train.loop import Trainer, train
from trainstack_train.parallel import init_distributed

from tests.unit.testcases.case_runs import LIBRARY, run_on_cpu
from tests.unit.testcases.conftest import S3_REGION

pytest.importorskip("s3torchconnector")
pytestmark = pytest.mark.moto

REGION = S3_REGION
FSDP_TRAIN = LIBRARY.parent / "pytorch" / "fsdp" / "train.py"
TINY = {"config": "tiny", "batch_size": 4, "seq_len": 32, "compile": "false", "device": "cpu", "fsdp": "true"}
ENV = {"AWS_REGION": REGION}


def _cfg(**overrides):
    cfg = TrainConfig(**{**TINY, **overrides})
    cfg.validate(1, ENV)
    return cfg


@pytest.fixture
def s3(bucket, gloo_world):
    """A fresh bucket on moto and a one-rank gloo world in this process."""
    return bucket


def _keys(client, bucket, prefix=""):
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def test_a_run_resumed_from_s3_continues_the_same_loss_curve_bit_for_bit(s3):
    client, bucket = s3
    uri = f"s3://{bucket}/run"
    whole = train(_cfg(steps=6))
    first = train(_cfg(steps=6, checkpoint_dir=uri, checkpoint_every=3, max_steps_this_run=3))
    assert _keys(client, bucket) == [
        "run/step-00000003/.metadata",
        "run/step-00000003/__0_0.distcp",
        f"run/step-00000003/{checkpoint.MARKER}",
    ]
    second = train(_cfg(steps=6, checkpoint_dir=uri, checkpoint_every=3))
    assert second.extra["resumed_from_step"] == 3
    assert whole.extra["losses"][:3] == first.extra["losses"]
    assert whole.extra["losses"][3:] == second.extra["losses"]  # bit-identical, not approximately equal
    assert f"run/step-00000006/{checkpoint.MARKER}" in _keys(client, bucket)


@pytest.mark.slow
def test_two_ranks_resume_from_s3_bit_for_bit(bucket, tmp_path):
    """torchrun, 2 processes, FSDP2 sharding for real: every rank writes its own shards to the bucket and
    reads them back; the resumed run continues the uninterrupted one's loss curve exactly."""
    client, name = bucket
    args = ["--config", "tiny", "--steps", "4", "--batch-size", "2", "--seq-len", "32", "--compile", "false"]
    ckpt = ["--checkpoint-dir", f"s3://{name}/ranks", "--checkpoint-every", "2"]
    whole = run_on_cpu(sys.executable, FSDP_TRAIN, tmp_path / "whole.json", *args, procs=2)
    stop = ["--max-steps-this-run", "2"]
    first = run_on_cpu(sys.executable, FSDP_TRAIN, tmp_path / "first.json", *args, *ckpt, *stop, procs=2)
    assert {"ranks/step-00000002/__0_0.distcp", "ranks/step-00000002/__1_0.distcp"} <= set(
        _keys(client, name)
    )
    second = run_on_cpu(sys.executable, FSDP_TRAIN, tmp_path / "second.json", *args, *ckpt, procs=2)
    assert second["resumed_from_step"] == 2 and first["world_size"] == second["world_size"] == 2
    assert whole["losses"] == first["losses"] + second["losses"]


def test_asynchronous_saves_and_retention_work_on_s3(s3):
    """Every 2 steps, written in the background, keep-last 1: only the newest checkpoint stays in the bucket,
    marker included, and it resumes to the same state as the run that wrote it."""
    client, bucket = s3
    cfg = _cfg(
        steps=6,
        checkpoint_dir=f"s3://{bucket}/async",
        checkpoint_every=2,
        checkpoint_async="true",
        checkpoint_keep_last=1,
    )
    summary = train(cfg)
    assert summary.extra["checkpoints"]["saved"] == 3
    assert {key.split("/")[1] for key in _keys(client, bucket)} == {"step-00000006"}
    assert f"async/step-00000006/{checkpoint.MARKER}" in _keys(client, bucket)
    resumed = Trainer(cfg, init_distributed("cpu"))
    assert resumed.start_step == 6


def test_a_partial_checkpoint_on_s3_is_skipped_and_named(s3, capsys):
    """A save killed before its marker (shards written, no train_state.json) is passed over: resume takes
    the newest complete one and says which it skipped."""
    client, bucket = s3
    cfg = _cfg(steps=6, checkpoint_dir=f"s3://{bucket}/run", checkpoint_every=3)
    train(cfg)
    client.delete_object(Bucket=bucket, Key=f"run/step-00000006/{checkpoint.MARKER}")
    assert "run/step-00000006/.metadata" in _keys(client, bucket)
    capsys.readouterr()
    resumed = Trainer(cfg, init_distributed("cpu"))
    assert resumed.start_step == 3
    assert (
        f"checkpoint: skipping s3://{bucket}/run/step-00000006: no {checkpoint.MARKER}, "
        "its save did not complete"
    ) in capsys.readouterr().out


def test_a_bucket_that_does_not_exist_is_refused_before_the_model_is_built(s3, monkeypatch):
    built = []
    monkeypatch.setattr("trainstack_train.loop.build_model", lambda *args: built.append(args))
    cfg = _cfg(checkpoint_dir="s3://no-such-bucket/run", checkpoint_every=3)
    with pytest.raises(ValueError, match=r"--checkpoint-dir s3://no-such-bucket/run: cannot list the bucket"):
        Trainer(cfg, init_distributed("cpu"))
    assert not built


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_checkpoint_of_another_model_shape_is_refused_naming_it(s3, tmp_path, where, monkeypatch):
    _client, bucket = s3
    directory = str(tmp_path / "ckpt") if where == "local" else f"s3://{bucket}/shape"
    train(_cfg(steps=2, checkpoint_dir=directory, checkpoint_every=2))
    built = []
    monkeypatch.setattr("trainstack_train.loop.build_model", lambda *args: built.append(args))
    other = _cfg(config="small", steps=4, checkpoint_dir=directory, checkpoint_every=2)
    with pytest.raises(ValueError) as refused:
        Trainer(other, init_distributed("cpu"))
    message = str(refused.value)
    assert message.startswith(f"--checkpoint-dir {directory}: ")
    assert "step-00000002 was saved by another model shape" in message
    assert "dim 64 there, 256 here" in message and "n_layers 2 there, 4 here" in message
    assert not built


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://Bad_Bucket/run", "'Bad_Bucket' is not a valid S3 bucket name"),
        ("s3://", "'' is not a valid S3 bucket name"),
        ("s3://ab/run", "'ab' is not a valid S3 bucket name"),
        ("s3://192.168.1.1/run", "'192.168.1.1' is not a valid S3 bucket name"),
        ("s3://bucket//run", "the key prefix '/run' has an empty, '.' or '..' path segment"),
        ("s3://bucket/a/../b", "has an empty, '.' or '..' path segment"),
        ("S3://bucket/run", "must start with s3:// (lower case)"),
    ],
)
def test_a_malformed_s3_uri_is_refused_naming_it(refusal, uri, expected):
    message = refusal(TrainConfig.parse, ["--checkpoint-dir", uri], ENV)
    assert f"error: --checkpoint-dir {uri!r}" in message and expected in message


def test_s3_needs_the_region(refusal):
    message = refusal(TrainConfig.parse, ["--checkpoint-dir", "s3://bucket/run"], {})
    assert message.endswith(
        "--checkpoint-dir s3://bucket/run needs the bucket's region in AWS_REGION (or AWS_DEFAULT_REGION)"
    )


def test_s3_without_s3torchconnector_is_refused_by_name():
    """A Python without site-packages (-S) lacks s3torchconnector for real; the arguments are checked
    without torch, so the refusal comes from the entrypoint itself, with exit status 2."""
    env = {**os.environ, "PYTHONPATH": str(LIBRARY), "AWS_REGION": REGION}
    proc = subprocess.run(
        [sys.executable, "-S", str(FSDP_TRAIN), "--checkpoint-dir", "s3://bucket/run"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "--checkpoint-dir s3://bucket/run needs the s3torchconnector package, which is not installed: "
            "pip install s3torchconnector[dcp]==1.5.0 s3torchconnectorclient==1.5.0"
        )
    )


def test_cases_that_checkpoint_to_a_shared_directory_only_refuse_s3(refusal):
    message = refusal(jax_parse_args, ["--checkpoint-dir", "s3://bucket/run"], ENV)
    assert message.endswith(
        "--checkpoint-dir s3://bucket/run: this test case writes checkpoints to a directory all nodes share; "
        "s3:// URIs are taken by pytorch/fsdp"
    )
