"""The model and DeepSpeed's engine for one run.

The network is ``pytorch/fsdp``'s ``Transformer`` at the named shape, initialised with the same seed on every
rank (so each starts from identical weights and ZeRO partitions one model), then handed with its optimizer
and the config of :func:`ds_llama.config.deepspeed_config` to ``deepspeed.initialize``, which casts it to
bf16, keeps the fp32 master weights in its ZeRO optimizer and partitions what the stage says.

Under ZeRO-3 the model's loss reads ``output.weight`` inside the root module's forward (the fused
cross-entropy never calls the ``output`` module); DeepSpeed gathers such a parameter itself: its parameter
dicts fetch a partitioned parameter read during a forward and register it as external to the running module
(a ZeRO-3 run that learns is tested).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass
from typing import Any

import torch
from trainstack_train.loop import lr_at
from trainstack_train.model import Transformer
from trainstack_train.parallel import apply_activation_checkpointing

from .config import BETAS, TrainConfig, deepspeed_config


def point_deepspeed_at(device: torch.device) -> None:
    """Choose DeepSpeed's accelerator before its first import: ``cuda`` on a GPU, ``cpu`` (gloo) otherwise.

    DeepSpeed picks its accelerator once, at import, from ``DS_ACCELERATOR`` or what it detects; the run's
    device (``--device``) decides instead, so a CPU run on a machine that has a GPU stays on the CPU. On the
    CPU DeepSpeed would also JIT-compile its shared-memory all-reduce (C++, at ``init_distributed``: a
    compiler and Python's headers on every node, a minute per node); the collectives stay gloo's, which is
    what the CPU runs use anyway, so that op is declared unavailable.
    """
    os.environ["DS_ACCELERATOR"] = device.type
    if device.type != "cpu":
        return
    # By module name: ``deepspeed.comm`` re-exports torch itself as its attribute ``torch``.
    ds_torch_comm = importlib.import_module("deepspeed.comm.torch")

    def no_shared_memory_op() -> None:
        return None

    ds_torch_comm.build_shm_op = no_shared_memory_op


def loss_kernel(device: torch.device) -> str:
    """pytorch/fsdp's Triton cross-entropy kernel on CUDA when Triton is there, else torch's eager one."""
    return "triton" if device.type == "cuda" and importlib.util.find_spec("triton") else "eager"


def build_model(cfg: TrainConfig, device: torch.device) -> Transformer:
    """The shape on the meta device, materialised on ``device`` in fp32 and initialised from ``--seed``."""
    with torch.device("meta"):
        model = Transformer(cfg.model, rope_len=cfg.seq_len)
    model.to_empty(device=device)
    model.tie_weights()
    model.init_weights(cfg.seed)
    model.loss_kernel = loss_kernel(device)
    apply_activation_checkpointing(model, cfg.ac)
    return model


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Decay on matrices, none on norm gains (pytorch/fsdp's groups)."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def schedule(cfg: TrainConfig) -> Any:
    """pytorch/fsdp's rate as a function of the step: ``LambdaLR`` over the optimizer DeepSpeed built or got.

    DeepSpeed steps it once per ``engine.step`` and keeps its state in its checkpoints.
    """

    def build_schedule(optimizer: Any) -> Any:
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_at(cfg, step) / cfg.lr)

    return build_schedule


def client_optimizer(groups: list[dict[str, Any]], cfg: TrainConfig, device: torch.device) -> Any:
    """``--optimizer torch``: torch's AdamW, fused on CUDA unless its state lives on the CPU."""
    on_gpu = device.type == "cuda" and cfg.offload_optimizer == "none"
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=BETAS, eps=1e-8, fused=on_gpu, foreach=not on_gpu)


@dataclass
class Built:
    """DeepSpeed's engine around the model, the unique parameter count, the config it was given."""

    engine: Any
    model: Transformer
    params: int
    config: dict[str, Any]


def build(cfg: TrainConfig, device: torch.device, world_size: int) -> Built:
    """Model, optimizer (ours, or DeepSpeed's from the config), engine."""
    import deepspeed

    model = build_model(cfg, device)
    params = model.num_params()
    config = deepspeed_config(cfg, world_size, device.type)
    groups = param_groups(model, cfg.weight_decay)
    optimizer = client_optimizer(groups, cfg, device) if cfg.optimizer == "torch" else None
    engine, *_others = deepspeed.initialize(
        model=model, optimizer=optimizer, model_parameters=groups, lr_scheduler=schedule(cfg), config=config
    )
    model.init_rope()  # the fp32 cos/sin table again: the engine's bf16 cast rounded every buffer
    return Built(engine=engine, model=model, params=params, config=config)


def jit_ops() -> list[str]:
    """DeepSpeed's C++/CUDA ops loaded in this process (JIT-compiled: the wheel is built without any)."""
    from deepspeed.ops.op_builder.builder import OpBuilder

    # DeepSpeed's own record of the ops it has loaded (or built) in this process.
    return sorted(OpBuilder._loaded_ops)
