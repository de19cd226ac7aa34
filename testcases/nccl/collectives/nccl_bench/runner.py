"""Allocate, time and check each collective.

Timing follows nccl-tests: ``warmup_iters`` untimed calls, then ``iters`` back-to-back calls between two
CUDA events (host clock after a barrier on CPU), average time per call. Sizes of ``large_bytes`` and more
use ``large_iters`` so a sweep up to 8 GiB stays within minutes. The check runs once per size after timing,
on known inputs (rank ``r`` holds ``r + 1``, or its rank-tagged blocks for all_to_all), and counts the
wrong elements like nccl-tests' ``#wrong``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable

import torch
import torch.distributed as dist

from .busbw import DTYPE_BYTES, Row, element_count

Op = Callable[[], object]
# torch 2.13 renames the *_tensor collectives; the GPU images still ship 2.11, so keep the portable names.
warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.distributed")


class Buffers:
    """Input and output of one op at one size, filled with checkable values."""

    def __init__(self, op: str, count: int, dtype: torch.dtype, device: torch.device) -> None:
        self.op = op
        self.rank = dist.get_rank()
        self.ranks = dist.get_world_size()
        share = count // self.ranks
        in_count = {"all_gather": share}.get(op, count)
        out_count = {"reduce_scatter": share, "all_reduce": 0, "broadcast": 0}.get(op, count)
        self.inp = torch.empty(in_count, dtype=dtype, device=device)
        self.out = torch.empty(out_count, dtype=dtype, device=device) if out_count else self.inp
        self.reset()

    def reset(self) -> None:
        """Known inputs; all_to_all blocks carry sender and receiver so misrouting shows."""
        if self.op == "all_to_all":
            block = self.inp.numel() // self.ranks
            dest = torch.arange(self.ranks, device=self.inp.device).repeat_interleave(block)
            self.inp.copy_(self.rank * self.ranks + dest)
        else:
            self.inp.fill_(self.rank + 1)

    def call(self) -> Op:
        """The collective as a zero-argument callable."""
        ops: dict[str, Op] = {
            "all_reduce": lambda: dist.all_reduce(self.inp),
            "all_gather": lambda: dist.all_gather_into_tensor(self.out, self.inp),
            "reduce_scatter": lambda: dist.reduce_scatter_tensor(self.out, self.inp),
            "all_to_all": lambda: dist.all_to_all_single(self.out, self.inp),
            "broadcast": lambda: dist.broadcast(self.inp, src=0),
        }
        return ops[self.op]

    def wrong(self) -> int:
        """Elements that differ from the expected result of one call on fresh inputs."""
        n = self.ranks
        if self.op in ("all_reduce", "reduce_scatter"):
            expected = torch.full_like(self.out, n * (n + 1) / 2)
        elif self.op == "all_gather":
            block = self.out.numel() // n
            expected = (
                torch.arange(1, n + 1, device=self.out.device).repeat_interleave(block).to(self.out.dtype)
            )
        elif self.op == "all_to_all":
            block = self.out.numel() // n
            src = torch.arange(n, device=self.out.device).repeat_interleave(block)
            expected = (src * n + self.rank).to(self.out.dtype)
        else:
            expected = torch.ones_like(self.out)
        return int((self.out != expected).sum().item())


def _timed(call: Op, iters: int, device: torch.device) -> float:
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    dist.barrier()
    started = time.perf_counter()
    for _ in range(iters):
        call()
    dist.barrier()
    return (time.perf_counter() - started) / iters


def measure(
    op: str, size: int, dtype_name: str, device: torch.device, iters: int, warmup: int, check: bool
) -> Row:
    """Time one op at one size; the max over ranks is reported, as the slowest rank bounds a collective."""
    ranks = dist.get_world_size()
    dtype = getattr(torch, dtype_name)
    count = element_count(op, size, ranks, DTYPE_BYTES[dtype_name])
    buffers = Buffers(op, count, dtype, device)
    call = buffers.call()
    for _ in range(warmup):
        call()
    seconds = torch.tensor([_timed(call, iters, device)], device=device)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    wrong = 0
    if check:
        buffers.reset()
        call()
        wrong = buffers.wrong()
    del buffers
    return Row.measured(op, count, dtype_name, float(seconds.item()), ranks, wrong)
