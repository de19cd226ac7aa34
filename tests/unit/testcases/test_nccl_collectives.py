"""nccl/collectives: nccl-tests' bandwidth conventions, wrong-element detection, and a 2-rank gloo run."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from nccl_bench.busbw import Row, bus_factor, element_count, sweep
from nccl_bench.config import parse_args, parse_size

NCCL_DIR = Path(__file__).resolve().parents[3] / "testcases" / "nccl" / "collectives"


@pytest.mark.parametrize(
    ("op", "factor"),
    [
        ("all_reduce", 1.75),
        ("all_gather", 0.875),
        ("reduce_scatter", 0.875),
        ("all_to_all", 0.875),
        ("broadcast", 1.0),
    ],
)
def test_bus_factors_are_nccl_tests_for_eight_ranks(op, factor):
    assert bus_factor(op, 8) == factor


def test_bandwidth_arithmetic():
    row = Row.measured("all_reduce", 1 << 28, "float32", 0.004, 8, 0)
    assert row.size_bytes == 1 << 30
    assert row.algbw_gbps == pytest.approx((1 << 30) / 0.004 / 1e9)
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps * 1.75)
    assert row.time_us == pytest.approx(4000.0)
    assert len(row.format().split()) == 9


def test_sweep_and_counts():
    assert sweep(8, 8 << 30, 2)[-1] == 8 << 30 and len(sweep(8, 8 << 30, 2)) == 31
    assert element_count("all_gather", 8, 8, 4) == 8  # at least one element per rank
    assert element_count("reduce_scatter", 100, 3, 4) == 24
    assert element_count("all_reduce", 100, 3, 4) == 25
    assert parse_size("8G") == 8 << 30 and parse_size("64K") == 65536 and parse_size("8") == 8


@pytest.mark.parametrize(
    ("argv", "needle"), [(["--ops", "gossip"], "--ops"), (["--max-bytes", "lots"], "max-bytes")]
)
def test_bad_options_are_named(argv, needle, capsys):
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"])
def test_a_corrupted_result_is_counted_wrong(op, gloo_world):
    import torch.distributed as dist
    from nccl_bench.runner import Buffers

    dist.init_process_group("gloo")
    buffers = Buffers(op, 16, torch.float32, torch.device("cpu"))
    buffers.call()()
    assert buffers.wrong() == 0
    buffers.out[3] += 1
    assert buffers.wrong() == 1


def test_two_rank_sweep_writes_rows_and_summary(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    summary = tmp_path / "nccl.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--rdzv-backend", "c10d"]
    cmd += ["--rdzv-endpoint", f"127.0.0.1:{port}", str(NCCL_DIR / "collectives.py"), "--max-bytes", "4K"]
    cmd += ["--step-factor", "8", "--iters", "2", "--warmup-iters", "1", "--summary-json", str(summary)]
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(summary.read_text())
    assert result["testcase"] == "nccl/collectives" and result["world_size"] == 2
    assert result["wrong_total"] == 0 and result["first_loss"] is None
    assert {r["op"] for r in result["results"]} == {
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "all_to_all",
    }
    assert [r["size_bytes"] for r in result["results"] if r["op"] == "all_reduce"] == [8, 64, 512, 4096]
    assert all(r["busbw_gbps"] > 0 for r in result["results"])
    metric_lines = [line for line in proc.stdout.splitlines() if line.startswith("TRAINSTACK_METRIC ")]
    assert len(metric_lines) == len(result["results"])
