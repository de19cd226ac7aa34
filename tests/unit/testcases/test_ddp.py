"""pytorch/ddp: learns, resumes from its checkpoint, and runs as two gloo ranks under torchrun."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from ddp_ngram.config import DDPConfig
from ddp_ngram.loop import train

DDP_DIR = Path(__file__).resolve().parents[3] / "testcases" / "pytorch" / "ddp"


def test_loss_falls_on_the_synthetic_sequence(gloo_world):
    whole = train(DDPConfig(steps=20, device="cpu"))
    assert whole["final_loss"] < whole["first_loss"] / 4


def test_resume_from_checkpoint_continues_bit_identically(tmp_path, monkeypatch):
    import torch.distributed as dist

    def run(**kwargs):
        for key, value in {
            "RANK": "0",
            "LOCAL_RANK": "0",
            "WORLD_SIZE": "1",
            "LOCAL_WORLD_SIZE": "1",
        }.items():
            monkeypatch.setenv(key, value)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
            monkeypatch.setenv("MASTER_PORT", str(sock.getsockname()[1]))
        try:
            return train(DDPConfig(device="cpu", **kwargs))
        finally:
            dist.destroy_process_group()

    whole = run(steps=8)
    run(steps=4, checkpoint_dir=str(tmp_path), checkpoint_every=4)
    rest = run(steps=8, checkpoint_dir=str(tmp_path))
    assert rest["resumed_from_step"] == 4
    assert rest["losses"] == whole["losses"][4:]


def test_two_ranks_under_torchrun(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    summary = tmp_path / "ddp.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--rdzv-backend", "c10d"]
    cmd += ["--rdzv-endpoint", f"127.0.0.1:{port}", str(DDP_DIR / "train.py"), "--steps", "10"]
    cmd += ["--summary-json", str(summary)]
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(summary.read_text())
    assert result["testcase"] == "pytorch/ddp" and result["world_size"] == 2
    assert result["final_loss"] < result["first_loss"]
    assert sum(line.startswith("TRAINSTACK_METRIC ") for line in proc.stdout.splitlines()) == 10
