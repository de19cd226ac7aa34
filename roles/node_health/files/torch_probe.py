#!/usr/bin/env python3
"""PyTorch half of node_health, run by the training interpreter (which may be a venv without Ansible).

Prints one JSON line: the versions a job will get (torch, CUDA, cuDNN, NCCL), a matrix product on every GPU
checked against a float64 reference, and an all-reduce across all of the node's GPUs (NCCL) whose sum is
checked. Without CUDA it does the same on CPU with two gloo processes, so the code path stays tested on
machines without a GPU.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

MATMUL_N = 4096
ALLREDUCE_ELEMENTS = 64 * 1024 * 1024 // 4  # 64 MiB of float32


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def matmul(device: torch.device) -> dict[str, Any]:
    """A bf16 GEMM for speed and a small float32 one checked against float64 for correctness."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(256, 256, generator=gen, dtype=torch.float64)
    b = torch.randn(256, 256, generator=gen, dtype=torch.float64)
    got = (a.float().to(device) @ b.float().to(device)).double().cpu()
    error = float((got - a @ b).abs().max())
    n = MATMUL_N if device.type == "cuda" else 512
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    x = torch.randn(n, n, device=device, dtype=dtype)
    x @ x
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started = time.perf_counter()
    reps = 20
    for _rep in range(reps):
        x @ x
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - started
    return {
        "device": str(device),
        "max_abs_error": error,
        "tflops": round(2 * n**3 * reps / seconds / 1e12, 2),
    }


def _allreduce_worker(rank: int, world: int, port: int, backend: str, queue: Any) -> None:
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        elements = ALLREDUCE_ELEMENTS if backend == "nccl" else 1 << 20
        tensor = torch.full((elements,), float(rank + 1), device=device)
        dist.all_reduce(tensor)
        if backend == "nccl":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        dist.all_reduce(tensor)
        if backend == "nccl":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - started
        expected = float(world * (world + 1) // 2) * world  # the second reduce sums the first sum again
        ok = bool(torch.all(tensor == expected).item())
        queue.put({"rank": rank, "ok": ok, "seconds": seconds, "bytes": elements * 4})
    finally:
        dist.destroy_process_group()


def allreduce(world: int, backend: str) -> dict[str, Any]:
    """All-reduce across ``world`` local processes; bus bandwidth with nccl-tests' 2(n-1)/n factor."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    mp.start_processes(
        _allreduce_worker, args=(world, _free_port(), backend, queue), nprocs=world, start_method="spawn"
    )
    rows = [queue.get(timeout=60) for _rank in range(world)]
    seconds = max(r["seconds"] for r in rows)
    size = rows[0]["bytes"]
    busbw = size / seconds / 1e9 * (2 * (world - 1) / world) if world > 1 else 0.0
    return {
        "backend": backend,
        "ranks": world,
        "ok": all(r["ok"] for r in rows),
        "busbw_gbps": round(busbw, 2),
    }


def main() -> int:
    """Print the report; the exit status is 0 even when a problem is found (the caller reads ``problems``)."""
    cuda = torch.cuda.is_available()
    report: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        "cuda_devices": torch.cuda.device_count() if cuda else 0,
        "problems": [],
    }
    devices = [torch.device("cuda", i) for i in range(report["cuda_devices"])] or [torch.device("cpu")]
    report["matmul"] = [matmul(device) for device in devices]
    for row in report["matmul"]:
        if row["max_abs_error"] > 1e-2:
            report["problems"].append(
                f"matmul on {row['device']} is wrong (max error {row['max_abs_error']:.3g})"
            )
    report["allreduce"] = allreduce(len(devices) if cuda else 2, "nccl" if cuda else "gloo")
    if not report["allreduce"]["ok"]:
        report["problems"].append(f"{report['allreduce']['backend']} all-reduce returned a wrong sum")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
