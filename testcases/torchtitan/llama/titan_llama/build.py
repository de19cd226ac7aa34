"""torchtitan's objects for one run: job config, parallel dimensions, model, optimizer, schedule, checkpoints.

Everything here is torchtitan 0.2.2's own API, called the way its trainer (``torchtitan.train.Trainer``)
calls it, with our arguments in place of its TOML file: the model is built on the meta device, converted
(float8), pipelined or parallelised by ``parallelize_llama`` (TP, activation checkpointing, per-block compile,
FSDP2, in torchtitan's order), materialised and initialised, then handed to its optimizer and LR-scheduler
containers and its ``CheckpointManager``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torchtitan.components.checkpoint import CheckpointManager
from torchtitan.components.loss import build_cross_entropy_loss
from torchtitan.components.lr_scheduler import LRSchedulersContainer, build_lr_schedulers
from torchtitan.components.optimizer import OptimizersContainer, build_optimizers
from torchtitan.config import JobConfig
from torchtitan.distributed import ParallelDims
from torchtitan.distributed import parallel_dims as torchtitan_dims
from torchtitan.distributed import utils as torchtitan_dist_utils
from torchtitan.distributed.pipeline_parallel import pipeline_llm
from torchtitan.models.llama3.infra.parallelize import parallelize_llama
from torchtitan.models.llama3.model.args import RoPEScalingArgs, TransformerModelArgs
from torchtitan.models.llama3.model.model import Transformer
from torchtitan.protocols.model_converter import build_model_converters
from torchtitan.tools import utils as torchtitan_utils
from trainstack_train.config import ModelConfig
from trainstack_train.fp8 import fp8_refusal, gpu_arch

from .config import TrainConfig


def model_args(shape: ModelConfig, seq_len: int) -> TransformerModelArgs:
    """Our named shape as torchtitan's arguments.

    ``multiple_of = ffn_dim`` and no multiplier: torchtitan rounds ``int(8 * dim / 3)`` up to a multiple of
    it, which is exactly ``ffn_dim`` for every Llama-3 shape (checked after the build); RoPE keeps the
    shape's long-context scaling (factor 1 where it has none).
    """
    scaling = shape.rope_scaling or {}
    rope = RoPEScalingArgs(
        scaling_factor=scaling.get("factor", 1.0),
        low_freq_factor=scaling.get("low_freq_factor", 1.0),
        high_freq_factor=scaling.get("high_freq_factor", 4.0),
        original_max_position_embeddings=int(scaling.get("original_max_position_embeddings", 8192)),
    )
    return TransformerModelArgs(
        dim=shape.dim,
        n_layers=shape.n_layers,
        n_heads=shape.n_heads,
        n_kv_heads=shape.n_kv_heads,
        vocab_size=shape.vocab_size,
        multiple_of=shape.ffn_dim,
        norm_eps=shape.norm_eps,
        rope_theta=shape.rope_theta,
        rope_scaling_args=rope,
        max_seq_len=seq_len,
    )


def use_compile(cfg: TrainConfig, device: torch.device) -> bool:
    """``auto`` compiles on GPU only: on CPU Inductor's C++ build costs more than the tiny steps."""
    return cfg.compile == "true" or (cfg.compile == "auto" and device.type == "cuda")


def job_config(cfg: TrainConfig, device: torch.device, world: int) -> JobConfig:
    """torchtitan's ``JobConfig`` holding what our options mean, torchtitan's defaults for the rest."""
    job = JobConfig()
    job.job.dump_folder = cfg.checkpoint_dir or "."
    job.training.local_batch_size = cfg.batch_size
    job.training.seq_len = cfg.seq_len
    job.training.steps = cfg.steps
    job.training.max_norm = cfg.grad_clip
    # bf16 parameters with fp32 reduction under FSDP, the recommended GPU setting; fp32 on CPU (gloo).
    job.training.mixed_precision_param = "bfloat16" if device.type == "cuda" else "float32"
    job.parallelism.data_parallel_shard_degree = cfg.fsdp_degree(world)
    job.parallelism.tensor_parallel_degree = cfg.tp
    job.parallelism.pipeline_parallel_degree = cfg.pp
    job.parallelism.pipeline_parallel_microbatch_size = 1
    job.compile.enable = use_compile(cfg, device)
    job.compile.components = ["model", "loss"]
    job.activation_checkpoint.mode = cfg.ac
    job.optimizer.lr = cfg.lr
    job.optimizer.weight_decay = cfg.weight_decay
    job.optimizer.implementation = "fused" if device.type == "cuda" else "foreach"
    job.lr_scheduler.warmup_steps = cfg.warmup_steps
    job.lr_scheduler.decay_type = "cosine"
    job.lr_scheduler.min_lr_factor = cfg.min_lr_ratio
    if cfg.precision == "fp8":
        job.model.converters = ["quantize.linear.float8"]
        job.quantize.linear.float8.recipe_name = cfg.fp8_recipe
        # The output layer feeds the loss; torchtitan's own recipes leave it in bf16 too.
        job.quantize.linear.float8.filter_fqns = ["output"]
    job.checkpoint.enable = bool(cfg.checkpoint_dir)
    job.checkpoint.folder = cfg.checkpoint_dir
    job.checkpoint.interval = cfg.checkpoint_every or cfg.steps
    # Full state at every save, the last one included, so a relaunch resumes exactly.
    job.checkpoint.last_save_model_only = False
    job.checkpoint.initial_load_model_only = False
    return job


def parallel_dims(cfg: TrainConfig, world: int) -> ParallelDims:
    """torchtitan's degrees; the rules were checked before (``TrainConfig.validate``)."""
    return ParallelDims(
        dp_replicate=1,
        dp_shard=cfg.fsdp_degree(world),
        cp=1,
        tp=cfg.tp,
        pp=cfg.pp,
        ep=1,
        etp=1,
        world_size=world,
    )


def refuse_fp8_on_this_device(cfg: TrainConfig, device: torch.device) -> None:
    """The fp8 rule again on the node, against the device itself (the catalog may not have said)."""
    if cfg.precision != "fp8":
        return
    arch, source = gpu_arch(device, os.environ)
    reason = fp8_refusal(device.type, arch, source)
    if reason:
        raise ValueError(reason)


@dataclass
class Built:
    """What the loop steps: model parts (one, or this rank's pipeline stages) and torchtitan's containers."""

    job: JobConfig
    dims: ParallelDims
    parts: list[nn.Module]
    optimizers: OptimizersContainer
    schedulers: LRSchedulersContainer
    loss_fn: Any
    pp_schedule: Any
    first_stage: bool
    last_stage: bool
    params: int

    def checkpointer(self, states: dict[str, Any], skip: Sequence[str] = ()) -> CheckpointManager:
        """torchtitan's ``CheckpointManager`` over our model parts, optimizer, schedule and ``states``; it
        saves them all and loads all but ``skip`` (states the checkpoint to resume does not hold)."""
        self.job.checkpoint.exclude_from_loading = list(skip)
        return CheckpointManager(
            dataloader=None,
            model_parts=self.parts,
            optimizers=self.optimizers,
            lr_schedulers=self.schedulers,
            states=states,
            checkpoint_config=self.job.checkpoint,
            sd_adapter=None,
        )


def _materialise(model: nn.Module, device: torch.device, tied: bool, seed: int) -> None:
    """Allocate on the device and run torchtitan's initialiser, with the same seed on every rank."""
    model.to_empty(device=device)
    if tied:
        model.output.weight = model.tok_embeddings.weight
    torch.manual_seed(seed)
    with torch.no_grad():
        model.init_weights(buffer_device=device)
    model.train()


def point_torchtitan_at(device: torch.device) -> None:
    """Tell torchtitan which device type its meshes use.

    torchtitan reads the accelerator once at import and falls back to ``cuda`` when there is none, so on a CPU
    node (the lab) its ``ParallelDims.build_mesh`` would ask CUDA for a device. Its device type is a module
    attribute of the modules that build meshes; a CPU run sets it to ``cpu``, which makes the meshes gloo's.
    """
    if device.type != "cpu":
        return
    for module in (torchtitan_utils, torchtitan_dims, torchtitan_dist_utils):
        module.device_type = "cpu"


def build(cfg: TrainConfig, device: torch.device, world: int) -> Built:
    """The model on the meta device, converted, parallelised, then materialised; torchtitan's optimizer."""
    refuse_fp8_on_this_device(cfg, device)
    point_torchtitan_at(device)
    job = job_config(cfg, device, world)
    dims = parallel_dims(cfg, world)
    dims.build_mesh()
    shape = cfg.model
    args = model_args(shape, cfg.seq_len)
    with torch.device("meta"):
        model = Transformer(args)
    ffn = model.layers["0"].feed_forward.w1.weight.shape[0]
    if ffn != shape.ffn_dim:
        raise ValueError(f"torchtitan's FFN width {ffn} is not {cfg.config}'s {shape.ffn_dim}")
    if shape.tie_embeddings:
        model.output.weight = model.tok_embeddings.weight
    params = sum(p.numel() for p in model.parameters())  # a tied weight is yielded once
    build_model_converters(job, dims).convert(model)
    loss_fn = build_cross_entropy_loss(job)
    schedule, first, last = None, True, True
    if dims.pp_enabled:
        schedule, parts, first, last = pipeline_llm(
            model, dims, job, device, args, parallelize_llama, _mean_loss(loss_fn, cfg, world)
        )
    else:
        parts = [parallelize_llama(model, dims, job)]
    if device.type == "cpu":
        _sum_reductions_only(parts)
    for part in parts:
        _materialise(part, device, shape.tie_embeddings and not dims.pp_enabled, cfg.seed)
    optimizers = build_optimizers(parts, job.optimizer, dims)
    schedulers = build_lr_schedulers(optimizers, job.lr_scheduler, job.training.steps)
    return Built(job, dims, parts, optimizers, schedulers, loss_fn, schedule, first, last, params)


def global_tokens(cfg: TrainConfig, world: int) -> int:
    """Tokens of one step over all data-parallel groups: what torchtitan divides its summed loss by.

    torchtitan switches FSDP's own gradient averaging off (divide factor 1) and divides the loss by the
    global token count instead, so gradients summed over the data-parallel ranks are the global mean's.
    """
    return cfg.batch_size * cfg.seq_len * cfg.fsdp_degree(world)


def _mean_loss(loss_fn: Any, cfg: TrainConfig, world: int) -> Any:
    """Each micro-batch's summed loss as its share of the global mean (what the pipeline back-propagates)."""
    tokens = global_tokens(cfg, world)

    def mean(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return loss_fn(pred, labels) / tokens

    return mean


def _sum_reductions_only(parts: list[nn.Module]) -> None:
    """On gloo, reduce gradients with plain sums.

    torchtitan sets FSDP's divide factor to 1, which FSDP2 turns into a pre-multiplied sum that only NCCL
    offers; forcing sum-type collectives gives the same numbers (a sum, then a division by 1) on gloo.
    """
    for part in parts:
        for module in part.modules():
            if isinstance(module, FSDPModule):
                module.set_force_sum_reduction_for_comms(True)
