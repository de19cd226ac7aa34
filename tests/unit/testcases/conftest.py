"""Shared fixtures for the test case catalog's CPU tests: import paths, a one-rank gloo group, and a real moto
S3 server with a fresh bucket (S3 checkpoints, S3 corpus input)."""

import os
import socket
import sys
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from tests.support import MOTO_KEYS, start_moto
from tests.unit.testcases.case_runs import LIBRARY

ROOT = Path(__file__).resolve().parents[3]
FSDP_DIR = ROOT / "testcases" / "pytorch" / "fsdp"
DDP_DIR = ROOT / "testcases" / "pytorch" / "ddp"
NCCL_DIR = ROOT / "testcases" / "nccl" / "collectives"
TITAN_DIR = ROOT / "testcases" / "torchtitan" / "llama"
MEGATRON_DIR = ROOT / "testcases" / "megatron" / "gpt"
HF_DIR = ROOT / "testcases" / "hf" / "finetune"
JAX_DIR = ROOT / "testcases" / "jax" / "llama"
DS_DIR = ROOT / "testcases" / "deepspeed" / "zero3"
DATA_PREPARE_DIR = ROOT / "testcases" / "data" / "prepare"
for path in (FSDP_DIR, DDP_DIR, NCCL_DIR, TITAN_DIR, MEGATRON_DIR, JAX_DIR, HF_DIR, DS_DIR, DATA_PREPARE_DIR):
    sys.path.insert(0, str(path))

torch = pytest.importorskip("torch")

S3_REGION = "us-east-1"


@pytest.fixture(scope="session", autouse=True)
def library_for_children():
    """Every process a test starts (an entrypoint, torchrun) imports the shared library from this checkout.

    In-process imports get it from pytest's ``pythonpath``; a child gets it from ``PYTHONPATH``, as a staged
    case gets it from the package copied beside its train.py. The slow cases' virtualenvs do not install it.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(
            "PYTHONPATH", os.pathsep.join(filter(None, [str(LIBRARY), os.environ.get("PYTHONPATH")]))
        )
        yield


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def gloo_world(monkeypatch):
    """A single-rank gloo process group (what ``python train.py`` gives), torn down after the test."""
    import torch.distributed as dist

    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}
    env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.fixture
def torchrun_env():
    """Environment for torchrun children: CPU only, one thread each (the machine has two cores)."""
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"})
    return env


@pytest.fixture
def refusal(capsys: pytest.CaptureFixture[str]) -> Callable[..., str]:
    """The message a test case's ``parse_args(argv, environ)`` exits with (status 2, argparse's way).

    Every case's parser refuses a broken rule, and an unknown option, as argparse does: usage, then the
    message on the last line of stderr. The tests assert the rule named there.
    """

    def refused(
        parse_args: Callable[[list[str], Mapping[str, str]], object],
        argv: list[str],
        environ: Mapping[str, str] | None = None,
    ) -> str:
        with pytest.raises(SystemExit) as exited:
            parse_args(argv, {} if environ is None else environ)
        assert exited.value.code == 2
        return capsys.readouterr().err.strip().splitlines()[-1]

    return refused


@pytest.fixture(scope="module")
def moto():
    """A moto server in a child process, one per test module."""
    server = start_moto()
    yield server
    server.stop()


@pytest.fixture
def bucket(moto, monkeypatch):
    """A fresh bucket on moto, and this process's AWS variables (its children's too) pointing at it."""
    for name in [name for name in os.environ if name.startswith("AWS_")]:
        monkeypatch.delenv(name)
    env = {"AWS_ENDPOINT_URL_S3": moto.url, "AWS_REGION": S3_REGION, "AWS_EC2_METADATA_DISABLED": "true"}
    for name, value in {**env, **MOTO_KEYS}.items():
        monkeypatch.setenv(name, value)
    client = moto.client("s3", S3_REGION)
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    return client, bucket
