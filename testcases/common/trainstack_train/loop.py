"""The training loop: build, resume, step, log, checkpoint, summarise.

One step is forward + fused loss, backward, gradient clipping folded into the fused AdamW kernel, and the
learning rate of a linear warm-up then cosine decay, set from the step number so a resumed run needs no
scheduler state. Loss and gradient norm are read once per step, one step late (see :meth:`Trainer.step`),
so the host never stalls the GPU; step time is the interval between those reads.
"""

from __future__ import annotations

import importlib.util
import math
import os
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from . import checkpoint
from .config import TrainConfig
from .data import BatchSource
from .fp8 import check_fp8, convert_to_fp8
from .metrics import (
    StepTimer,
    Summary,
    finish_run,
    flops_per_token,
    last_step,
    now,
    peak_memory_gb,
    report,
    step_record,
)
from .model import Transformer
from .optim import MasterWeightAdamW
from .parallel import (
    DistInfo,
    apply_activation_checkpointing,
    apply_compile,
    apply_fsdp,
    build_mesh,
    configure_attention,
    configure_compiler,
    init_distributed,
    reshard_policy,
)
from .storage import CheckpointStore, open_store

TESTCASE = "pytorch/fsdp"


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Linear warm-up over ``warmup_steps``, then cosine decay to ``min_lr_ratio * lr`` at ``steps``."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps))
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.lr * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cosine)


def _use_compile(cfg: TrainConfig, info: DistInfo) -> bool:
    return cfg.compile == "true" or (cfg.compile == "auto" and info.device.type == "cuda")


def _param_dtype(cfg: TrainConfig, info: DistInfo) -> torch.dtype:
    if cfg.mixed_precision == "bf16" or (cfg.mixed_precision == "auto" and info.device.type == "cuda"):
        return torch.bfloat16
    return torch.float32


def use_fsdp(cfg: TrainConfig, info: DistInfo) -> bool:
    """``auto`` shards only when there is more than one process: on one device FSDP2 has nothing to shard.

    ``--fsdp true`` keeps the FSDP2 path on one device too (to compare, or to test it on a laptop).
    """
    if cfg.fsdp == "false" and info.world_size > 1:
        raise ValueError(f"--fsdp false needs a single process, but the world size is {info.world_size}")
    return cfg.fsdp == "true" or info.world_size > 1


def build_model(cfg: TrainConfig, info: DistInfo) -> Transformer:
    """Construct on the meta device, wrap (AC, compile, FSDP2 where sharding), then materialise.

    Unsharded, the parameters are materialised in the master dtype; :func:`build_optimizer` keeps that copy
    and moves the model to the compute dtype.
    """
    shard = use_fsdp(cfg, info)
    kernel = loss_kernel(cfg, info)
    check_fp8(cfg.precision, info.device, os.environ)
    with torch.device("meta"):
        model = Transformer(cfg.model, rope_len=cfg.seq_len)
        if cfg.master_dtype == "bf16":
            model.to(torch.bfloat16)
    model.loss_chunk_tokens = cfg.loss_chunk_tokens
    model.fp8_linears = convert_to_fp8(model, cfg.fp8_recipe) if cfg.precision == "fp8" else 0
    model.fp8_head = cfg.precision == "fp8" and cfg.fp8_head == "true"
    model.set_expand_kv(cfg.gqa_mode == "expand")
    apply_activation_checkpointing(model, cfg.ac)
    if _use_compile(cfg, info):
        configure_compiler(cfg.compile_tuning)
        apply_compile(model)
    if shard:
        reshard = reshard_policy(cfg.reshard_after_forward, model.num_params())
        apply_fsdp(model, build_mesh(info), _param_dtype(cfg, info), reshard)
    model.loss_kernel = kernel
    model.to_empty(device=info.device)
    if not shard:
        model.tie_weights()
    model.init_weights(cfg.seed)
    return model


def loss_kernel(cfg: TrainConfig, info: DistInfo) -> str:
    """``auto``: the Triton cross-entropy kernel on CUDA when Triton is installed (CUDA torch wheels bring
    it), else torch's own, compiled when the model is.

    An explicit ``--loss-kernel triton`` without a GPU or without Triton is refused here, by name, before the
    model is built.
    """
    has_triton = importlib.util.find_spec("triton") is not None
    if cfg.loss_kernel == "triton" and not (info.device.type == "cuda" and has_triton):
        raise ValueError("--loss-kernel triton needs a CUDA device and the triton package")
    if cfg.loss_kernel != "auto":
        return cfg.loss_kernel
    if info.device.type == "cuda" and has_triton:
        return "triton"
    return "compiled" if _use_compile(cfg, info) else "eager"


def build_optimizer(model: torch.nn.Module, cfg: TrainConfig, info: DistInfo) -> torch.optim.Optimizer:
    """AdamW, no decay on norm gains, one fused kernel per update (clipping included).

    Sharded, or when the model already computes in its master dtype: PyTorch's fused AdamW. Unsharded with
    bf16 compute over fp32 master weights: :class:`MasterWeightAdamW`, which owns the fp32 copy.
    """
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    betas = (cfg.beta1, cfg.beta2)
    compute = _param_dtype(cfg, info)
    if not use_fsdp(cfg, info) and decay[0].dtype != compute:
        compiled = _use_compile(cfg, info)
        return MasterWeightAdamW(groups, lr=cfg.lr, betas=betas, compute_dtype=compute, compiled=compiled)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=betas, fused=True)


def _step_stats(loss: torch.Tensor, norm: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """``[global mean loss, grad norm]`` as a device tensor: queued now, read one step later."""
    reduced = loss.detach().float().clone()
    if info.world_size > 1:
        dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
        reduced /= info.world_size
    return torch.stack((reduced, norm.detach().float().to(reduced.device)))


def clip_into_optimizer(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, max_norm: float
) -> torch.Tensor:
    """Gradient clipping without its own pass over the gradients; returns the (global) gradient norm.

    The fused AdamW kernel divides every gradient by ``optimizer.grad_scale`` as it reads it (the attribute
    protocol GradScaler uses for fused optimizers), so setting it to ``1 / clip_coefficient`` clips inside
    the update; ``clip_grad_norm_`` would rewrite all gradients first (about 1 % of a 1B step on an H200).
    """
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    # Summed in fp32 even for bf16 gradients (the unsharded path), where a bf16 norm keeps 3 digits.
    norms = torch._foreach_norm(grads, 2.0, dtype=torch.float32)
    norm = torch.linalg.vector_norm(torch.stack(norms))
    if isinstance(norm, DTensor):
        norm = norm.full_tensor()
    coefficient = (max_norm / (norm.float() + 1e-6)).clamp(max=1.0)
    optimizer.grad_scale = 1.0 / coefficient  # type: ignore[attr-defined]
    return norm


def open_checkpoints(
    cfg: TrainConfig, is_main: bool
) -> tuple[CheckpointStore | None, checkpoint.ResumePoint]:
    """The checkpoint store and where to resume, checked before the model is built.

    A bucket that does not exist, or a newest complete checkpoint saved by another model shape, is refused
    here (``ValueError`` naming ``--checkpoint-dir``) rather than after minutes of building and compiling;
    partial checkpoints passed over are named on rank 0.
    """
    fresh = checkpoint.ResumePoint(0, None, {}, [])
    if not cfg.checkpoint_dir:
        return None, fresh
    store = open_store(cfg.checkpoint_dir, os.environ)
    store.check()
    point = checkpoint.resume_point(store, cfg.model)
    if is_main:
        checkpoint.announce_skipped(point)
    return store, point


class Trainer:
    """State of one invocation, so :func:`train` reads as the sequence of phases it is."""

    def __init__(self, cfg: TrainConfig, info: DistInfo) -> None:
        self.cfg = cfg
        self.info = info
        self.store, point = open_checkpoints(cfg, info.is_main)
        self.model = build_model(cfg, info)
        self.optimizer = build_optimizer(self.model, cfg, info)
        self.start_step = 0
        if self.store is not None:
            self.start_step = checkpoint.load(self.store, point, self.model, self.optimizer)
        data_state = checkpoint.data_state(point)
        self.data = BatchSource(
            cfg.data, cfg.model.vocab_size, cfg.batch_size, cfg.seq_len, info.rank, info.world_size, cfg.seed
        )
        self.data.resume(self.start_step, data_state)
        self.tokens_per_step = cfg.batch_size * cfg.seq_len * info.world_size
        self.flops_token = flops_per_token(cfg.model, self.model.num_params(), cfg.seq_len)
        self.peak = cfg.peak_tflops
        self.timer = StepTimer(cfg.metric_warmup_steps, self.tokens_per_step)
        self.losses: list[float] = []
        self.pending: tuple[int, torch.Tensor, float] | None = None
        self.clock: float | None = None

    def step(self, step: int) -> dict[str, Any] | None:
        """Queue one optimizer step; returns the record of the *previous* step, if any.

        Reading this step's loss right away would make the host wait for the GPU to drain and then leave
        the GPU idle while the next step is launched; reading the previous one after queueing this step
        keeps the GPU fed. Step time is the interval between consecutive reads, which in steady state is
        the time the GPU takes per step.
        """
        for group in self.optimizer.param_groups:
            group["lr"] = lr_at(self.cfg, step)
        if self.clock is None:
            self.clock = now()
        inputs, targets = self.data.batch(step, self.info.device)
        loss = self.model(inputs, targets)
        loss.backward()
        norm = clip_into_optimizer(self.model, self.optimizer, self.cfg.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        record = self.finish()
        self.pending = (step, _step_stats(loss, norm, self.info), self.optimizer.param_groups[0]["lr"])
        return record

    def finish(self, timed: bool = True) -> dict[str, Any] | None:
        """Wait for the queued step and return its record (``None`` when nothing is queued).

        ``timed=False`` for a flush with nothing queued behind it (before a checkpoint, at the end): its
        interval is only the tail of the step, so it is reported but kept out of the throughput window.
        """
        if self.pending is None:
            return None
        step, stats, lr = self.pending
        self.pending = None
        loss_value, grad_norm = stats.tolist()
        rates = (self.info.world_size, self.peak)
        return step_record(
            self, step, (loss_value, grad_norm, lr), timed, rates, lambda: peak_memory_gb(self.info.device)
        )

    def pause_clock(self) -> None:
        """Exclude what follows (a checkpoint save) from the next step's time."""
        self.clock = None


def train(cfg: TrainConfig) -> Summary:
    """Run ``cfg`` to ``cfg.steps`` (or ``max_steps_this_run`` more steps) and return the summary."""
    t_start = now()
    info = init_distributed(cfg.device)
    torch.manual_seed(cfg.seed)
    configure_attention(cfg.attn_backend)
    run = Trainer(cfg, info)
    saver = checkpoint.Checkpointer(
        run.store,
        info.is_main,
        cfg.checkpoint_every > 0 and cfg.checkpoint_async == "true",
        (cfg.checkpoint_keep_last, cfg.checkpoint_keep_every),
        checkpoint.shape_record(cfg.model),
        cfg.checkpoint_write_threads,
        cfg.checkpoint_staging == "pinned",
    )
    last = last_step(cfg, run.start_step)
    for step in range(run.start_step, last):
        report(run.step(step), info.is_main)
        if cfg.checkpoint_every and (step + 1) % cfg.checkpoint_every == 0:
            report(run.finish(timed=False), info.is_main)
            saver.save(step + 1, run.model, run.optimizer, run.data.state())
            run.pause_clock()
    saver.close()
    return finish_run(
        TESTCASE,
        cfg,
        run,
        info.placement(),
        last=last,
        t_start=t_start,
        params=run.model.num_params(),
        extra={
            "config": cfg.config,
            "ac": cfg.ac,
            "compile": _use_compile(cfg, info),
            "loss_kernel": run.model.loss_kernel,
            "gqa": cfg.gqa_mode,
            "compile_tuning": cfg.compile_tuning,
            "param_dtype": str(_param_dtype(cfg, info)).removeprefix("torch."),
            "master_dtype": cfg.master_dtype,
            "precision": cfg.precision,
            "fp8_recipe": cfg.fp8_recipe if cfg.precision == "fp8" else None,
            "fp8_linears": run.model.fp8_linears,
            "fp8_head": run.model.fp8_head,
            "fsdp": use_fsdp(cfg, info),
            "optimizer": type(run.optimizer).__name__,
            "reshard_after_forward": reshard_policy(cfg.reshard_after_forward, run.model.num_params()),
            "torch": torch.__version__,
            "checkpoints": saver.summary(),
        },
    )
