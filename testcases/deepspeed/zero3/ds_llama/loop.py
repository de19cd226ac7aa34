"""The training loop around DeepSpeed's engine: resume, step, the metric line, checkpoints, the summary.

One step is DeepSpeed's: ``engine(inputs, targets)`` (the model's mean loss on this rank's rows),
``engine.backward`` (ZeRO reduces or reduce-scatters the gradients as they come) and ``engine.step``
(clipping, the optimizer on each rank's partition, the schedule). What is read and printed is
``pytorch/fsdp``'s, so the launcher parses both cases alike: a step's loss and gradient norm are read one
step later (the host never waits for the GPU in between), and the last line and the one before a checkpoint
carry null rates.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from trainstack_train.data import BatchSource, ReaderPosition
from trainstack_train.metrics import (
    StepTimer,
    Summary,
    finish_run,
    flops_per_token,
    now,
    peak_memory_gb,
    run_steps,
    step_record,
)
from trainstack_train.parallel import DistInfo, init_distributed, resolve_device

from . import checkpoint
from .build import Built, build, jit_ops, point_deepspeed_at
from .config import TrainConfig

TESTCASE = "deepspeed/zero3"


def join(cfg: TrainConfig) -> DistInfo:
    """torchrun's process group (pytorch/fsdp's ``init_distributed``: nccl on GPU, gloo on CPU), adopted by
    ``deepspeed.init_distributed``, which finds it initialised and wraps it instead of starting its own.
    """
    point_deepspeed_at(resolve_device(cfg.device))
    info = init_distributed(cfg.device)
    import deepspeed

    deepspeed.init_distributed(dist_backend="nccl" if info.device.type == "cuda" else "gloo")
    return info


def _grad_norm(engine: Any, device: torch.device) -> torch.Tensor:
    """The global gradient norm DeepSpeed computed for clipping, as a device tensor (read later)."""
    norm = engine.get_global_grad_norm()
    if norm is None:
        return torch.full((), float("nan"), device=device)
    return torch.as_tensor(norm, dtype=torch.float32).to(device)


class Trainer:
    """One invocation: DeepSpeed's engine; pytorch/fsdp's data, timer and records."""

    def __init__(self, cfg: TrainConfig, info: DistInfo) -> None:
        self.cfg = cfg
        self.info = info
        self.built: Built = build(cfg, info.device, info.world_size)
        self.position = ReaderPosition()
        self.start_step = (
            checkpoint.resume(self.built.engine, Path(cfg.checkpoint_dir), self.position)
            if cfg.checkpoint_dir
            else 0
        )
        self.data = BatchSource(
            cfg.data, cfg.model.vocab_size, cfg.batch_size, cfg.seq_len, info.rank, info.world_size, cfg.seed
        )
        self.position.attach(self.data, self.start_step)
        self.tokens_per_step = cfg.batch_size * cfg.seq_len * info.world_size
        self.flops_token = flops_per_token(cfg.model, self.built.params, cfg.seq_len)
        self.timer = StepTimer(cfg.metric_warmup_steps, self.tokens_per_step)
        self.losses: list[float] = []
        self.pending: tuple[int, torch.Tensor, float] | None = None
        self.clock: float | None = None

    def step(self, step: int) -> dict[str, Any] | None:
        """Queue one step; return the record of the previous one (read now, while this one runs)."""
        engine = self.built.engine
        if self.clock is None:
            self.clock = now()
        inputs, targets = self.data.batch(step, self.info.device)
        loss = engine(inputs, targets)
        engine.backward(loss)
        lr = engine.get_lr()[0]
        engine.step()
        record = self.finish()
        self.pending = (step, self._stats(loss, _grad_norm(engine, self.info.device)), lr)
        return record

    def _stats(self, loss: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
        """``[global mean loss, grad norm]``, queued on the device now and read a step later."""
        reduced = loss.detach().float().reshape(())
        if self.info.world_size > 1:
            reduced = reduced.clone()
            dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
            reduced /= self.info.world_size
        return torch.stack((reduced, norm.reshape(()).to(reduced.device)))

    def finish(self, timed: bool = True) -> dict[str, Any] | None:
        """The queued step's record; ``timed=False`` for a flush (only the tail of the step was timed)."""
        if self.pending is None:
            return None
        step, stats, lr = self.pending
        self.pending = None
        loss_value, grad_norm = (float(v) for v in stats.tolist())
        rates = (self.info.world_size, self.cfg.peak_tflops)
        return step_record(
            self, step, (loss_value, grad_norm, lr), timed, rates, lambda: peak_memory_gb(self.info.device)
        )

    def save(self, step: int) -> None:
        """DeepSpeed's save on every rank; excluded from the next step's time."""
        checkpoint.save(
            self.built.engine, Path(self.cfg.checkpoint_dir), step, self.info.is_main, self.position
        )
        self.clock = None


def train(cfg: TrainConfig) -> Summary:
    """Run to ``--steps`` (or ``--max-steps-this-run`` more) and write the summary on rank 0."""
    t_start = now()
    info = join(cfg)
    run = Trainer(cfg, info)
    last = run_steps(cfg, run, info.is_main, run.save if cfg.checkpoint_dir else None)
    import deepspeed

    engine = run.built.engine
    facts = {
        "config": cfg.config,
        "zero_stage": engine.zero_optimization_stage(),
        "offload_optimizer": cfg.offload_optimizer,
        "offload_param": cfg.offload_param,
        "optimizer": cfg.optimizer,
        "optimizer_class": type(engine.optimizer).__name__,
        "bf16": engine.bfloat16_enabled(),
        "ac": cfg.ac,
        "compile": False,
        "loss_kernel": run.built.model.loss_kernel,
        "jit_ops": jit_ops(),
        "accelerator": os.environ.get("DS_ACCELERATOR"),
        "torch": torch.__version__,
        "deepspeed": deepspeed.__version__,
    }
    return finish_run(
        TESTCASE, cfg, run, info.placement(), last=last, t_start=t_start, params=run.built.params, extra=facts
    )
