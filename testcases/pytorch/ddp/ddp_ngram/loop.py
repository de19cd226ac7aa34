"""DDP training loop with the trainstack metric line, JSON summary and an auto-resumed checkpoint."""

from __future__ import annotations

import json
import os
import resource
import socket
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from trainstack_train.metrics import PEAK_UNKNOWN, emit, torch_record

from .config import DDPConfig
from .data import batch
from .model import NGramLM

CHECKPOINT = "ddp_state.pt"


def _init(requested: str) -> torch.device:
    """Join torchrun's group; plain ``python`` becomes a one-rank group on a free port."""
    if "RANK" not in os.environ:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"})
        os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        device = torch.device("cpu")
    else:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return device


def _gpu_name(device: torch.device) -> str | None:
    """Reported in the summary only; the MFU peak comes from --peak-tflops, never from this name."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


def _resume(cfg: DDPConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Rank 0 wrote the whole state (DDP replicas are identical); every rank reads it."""
    path = Path(cfg.checkpoint_dir) / CHECKPOINT if cfg.checkpoint_dir else None
    if path is None or not path.is_file():
        return 0
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optim"])
    return int(state["step"])


def _save(cfg: DDPConfig, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    if dist.get_rank() == 0:
        target = Path(cfg.checkpoint_dir)
        target.mkdir(parents=True, exist_ok=True)
        state = {"model": model.state_dict(), "optim": optimizer.state_dict(), "step": step}
        torch.save(state, target / (CHECKPOINT + ".tmp"))
        (target / (CHECKPOINT + ".tmp")).replace(target / CHECKPOINT)
    dist.barrier()


def train(cfg: DDPConfig) -> dict[str, Any]:
    """Train, print a metric line per step on rank 0, return (and on rank 0 write) the summary."""
    started = time.perf_counter()
    device = _init(cfg.device)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(cfg.seed)
    model = NGramLM(cfg).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    first = _resume(cfg, model, optimizer)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    gpu, peak = _gpu_name(device), cfg.peak_tflops
    flops_sample = 6.0 * model.matmul_params()
    losses: list[float] = []
    times: list[float] = []
    for step in range(first, cfg.steps):
        t0 = time.perf_counter()
        context, target = (
            t.to(device) for t in batch(step, rank, cfg.batch_size, cfg.context, cfg.vocab_size, cfg.seed)
        )
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = torch.nn.functional.cross_entropy(ddp(context).float(), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        reduced = loss.detach().clone()
        dist.all_reduce(reduced)
        losses.append(reduced.item() / world)
        times.append(time.perf_counter() - t0)
        rate = cfg.batch_size * world / times[-1]
        if rank == 0:
            record = {"step": step + 1, "loss": losses[-1], "tokens_per_s": rate, "step_time_s": times[-1]}
            record["tflops_per_gpu"] = rate / world * flops_sample / 1e12
            record["mfu"] = record["tflops_per_gpu"] / peak if peak else None
            emit(record)
        if cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0:
            _save(cfg, step + 1, model, optimizer)
    window = times[cfg.metric_warmup_steps :] or times
    tokens_per_s = cfg.batch_size * world * len(window) / sum(window) if window else None
    tflops = tokens_per_s / world * flops_sample / 1e12 if tokens_per_s else None
    peak_mem = (
        torch.cuda.max_memory_allocated(device) / 1e9
        if device.type == "cuda"
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    )
    summary = {
        "testcase": "pytorch/ddp",
        "world_size": world,
        "nodes": max(1, world // int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))),
        "device": device.type,
        "gpu_model": gpu,
        "steps": cfg.steps,
        "first_loss": losses[0] if losses else None,
        "final_loss": losses[-1] if losses else None,
        "tokens_per_s": tokens_per_s,
        "tflops_per_gpu": tflops,
        "mfu": tflops / peak if tflops and peak else None,
        "peak_tflops": peak,
        "mfu_note": None if peak else PEAK_UNKNOWN,
        "peak_mem_gb": peak_mem,
        "elapsed_s": time.perf_counter() - started,
        "resumed_from_step": first,
        "losses": losses,
        "note": "tokens_per_s counts predicted tokens (one per sample); FLOPs are 6 x matmul parameters",
        **torch_record(),
    }
    if rank == 0 and cfg.summary_json:
        Path(cfg.summary_json).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.summary_json).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary
