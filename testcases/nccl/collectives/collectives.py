"""Entry point of the ``nccl/collectives`` test case, started by torchrun (one process per GPU).

Prints nccl-tests-style rows on rank 0, one ``TRAINSTACK_METRIC`` line per row, and a JSON summary whose
``results`` list holds every row (loss fields are null: nothing is trained).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed as dist
from nccl_bench.busbw import HEADER, sweep
from nccl_bench.config import BenchConfig, parse_args
from nccl_bench.runner import measure

METRIC_PREFIX = "TRAINSTACK_METRIC "


def _device(requested: str) -> torch.device:
    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def _init(requested: str) -> torch.device:
    """Join torchrun's group; a plain ``python`` run becomes a one-rank group on a free port."""
    if "RANK" not in os.environ:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"})
        os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    device = _device(requested)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend, device_id=device if device.type == "cuda" else None)
    return device


def run(cfg: BenchConfig) -> dict[str, object]:
    """The sweep; returns the summary (rank 0 also prints and writes it)."""
    started = time.perf_counter()
    device = _init(cfg.device)
    main = dist.get_rank() == 0
    ranks = dist.get_world_size()
    rows = []
    for op in cfg.op_list:
        if main:
            print(f"# {op}, {ranks} ranks, {device.type}\n{HEADER}", flush=True)
        for size in sweep(cfg.min_bytes, cfg.max_bytes, cfg.step_factor):
            iters = cfg.large_iters if size >= cfg.large_bytes else cfg.iters
            row = measure(op, size, cfg.dtype, device, iters, cfg.warmup_iters, cfg.check == "true")
            rows.append(row)
            if main:
                print(row.format(), flush=True)
                print(METRIC_PREFIX + json.dumps(asdict(row)), flush=True)
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(ranks)))
    summary: dict[str, object] = {
        "testcase": "nccl/collectives",
        "world_size": ranks,
        "nodes": max(1, ranks // local_world),
        "device": device.type,
        "gpu_model": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "backend": dist.get_backend(),
        "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if device.type == "cuda" else None,
        "steps": None,
        "first_loss": None,
        "final_loss": None,
        "tokens_per_s": None,
        "tflops_per_gpu": None,
        "mfu": None,
        "peak_mem_gb": torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None,
        "elapsed_s": time.perf_counter() - started,
        "wrong_total": sum(row.wrong for row in rows),
        "max_busbw_gbps": {op: max(r.busbw_gbps for r in rows if r.op == op) for op in cfg.op_list},
        "environment": {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "TORCH_SYMM"))},
        "results": [asdict(row) for row in rows],
        # As trainstack_train.metrics.torch_record writes them (this case stages no shared library).
        "torch_version": torch.__version__,
        "torch_accepted": (
            {
                "found": os.environ["TRAINSTACK_TORCH_ACCEPTED"],
                "lock": os.environ.get("TRAINSTACK_TORCH_LOCK", ""),
            }
            if os.environ.get("TRAINSTACK_TORCH_ACCEPTED")
            else None
        ),
    }
    if main and cfg.summary_json:
        target = Path(cfg.summary_json)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> int:
    """Run the sweep; exit non-zero when any element came back wrong."""
    cfg = parse_args(argv)
    try:
        summary = run(cfg)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 1 if summary["wrong_total"] else 0


if __name__ == "__main__":
    sys.exit(main())
