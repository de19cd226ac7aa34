"""pytorch/ddp: learns, resumes from its checkpoint, and runs as two gloo ranks under torchrun."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from ddp_ngram.config import PEAK_ENV, DDPConfig, parse_args
from ddp_ngram.loop import PEAK_UNKNOWN, train

DDP_DIR = Path(__file__).resolve().parents[3] / "testcases" / "pytorch" / "ddp"


def test_loss_falls_on_the_synthetic_sequence(gloo_world):
    whole = train(DDPConfig(steps=20, device="cpu"))
    assert whole["final_loss"] < whole["first_loss"] / 4
    assert whole["mfu"] is None and whole["peak_tflops"] is None and whole["mfu_note"] == PEAK_UNKNOWN


def test_the_peak_comes_from_the_option_else_the_launchers_variable(monkeypatch):
    monkeypatch.delenv(PEAK_ENV, raising=False)
    assert parse_args([]).peak_tflops is None
    monkeypatch.setenv(PEAK_ENV, "989.4")
    assert parse_args([]).peak_tflops == 989.4
    assert parse_args(["--peak-tflops", "312"]).peak_tflops == 312.0


@pytest.mark.parametrize(
    ("argv", "env", "needle"),
    [
        (["--peak-tflops", "0"], None, "--peak-tflops must be a finite number > 0"),
        (["--peak-tflops", "inf"], None, "--peak-tflops must be a finite number > 0"),
        ([], "-5", f"{PEAK_ENV} (the default of --peak-tflops) must be a finite number > 0"),
        ([], "nan", f"{PEAK_ENV} (the default of --peak-tflops) must be a finite number > 0"),
    ],
)
def test_a_bad_peak_fails_naming_where_it_came_from(argv, env, needle, capsys, monkeypatch):
    monkeypatch.delenv(PEAK_ENV, raising=False)
    if env is not None:
        monkeypatch.setenv(PEAK_ENV, env)
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err


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
    # The peak as the launcher hands it over, in every rank's environment.
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", **{PEAK_ENV: "0.000001"})
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(summary.read_text())
    assert result["testcase"] == "pytorch/ddp" and result["world_size"] == 2
    assert result["peak_tflops"] == 1e-6 and result["mfu_note"] is None
    assert result["mfu"] == pytest.approx(result["tflops_per_gpu"] / 1e-6)
    assert result["final_loss"] < result["first_loss"]
    assert sum(line.startswith("TRAINSTACK_METRIC ") for line in proc.stdout.splitlines()) == 10
