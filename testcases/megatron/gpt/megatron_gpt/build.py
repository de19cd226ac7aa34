"""megatron-core's objects for one run: parallel groups, GPTModel, DDP wrapper, optimizer and LR schedule.

Everything here is megatron-core 0.16.1's own API, called the way its pretraining script calls it, with our
arguments in place of its command line: ``initialize_model_parallel`` makes the TP/PP/DP groups, ``GPTModel``
is built from the local layer spec (Transformer Engine is not installed: plain torch modules, unfused
attention), cast to bf16 by ``Float16Module``, wrapped by megatron-core's ``DistributedDataParallel`` (one
contiguous fp32 gradient buffer), and handed to ``get_megatron_optimizer`` (fp32 master weights, optionally
the distributed optimizer) and ``OptimizerParamScheduler`` (warm-up, cosine decay).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

import torch
from megatron.core import parallel_state, tensor_parallel
from megatron.core.distributed import (
    DistributedDataParallel,
    DistributedDataParallelConfig,
    finalize_model_grads,
)
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.optimizer import MegatronOptimizer, OptimizerConfig, get_megatron_optimizer
from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
from megatron.core.transformer.module import Float16Module
from megatron.core.transformer.transformer_config import TransformerConfig
from torch import nn
from torch.nn import functional

from .config import TrainConfig


def transformer_config(cfg: TrainConfig, cpu_init: bool) -> TransformerConfig:
    """Our named shape as megatron-core's ``TransformerConfig``: a Llama-3 block, bf16, our degrees.

    Llama's block in Megatron's terms: RMSNorm, gated linear unit with SiLU (SwiGLU), no biases, grouped
    query attention (``num_query_groups`` = KV heads), no dropout. Fusions that need Transformer Engine,
    Apex, a compiler or Megatron-LM's own C++ extensions stay off: RoPE fusion, gradient-accumulation
    fusion, the TorchScript bias-SwiGLU, and the masked-softmax fusion, whose availability check itself
    imports ``scaled_masked_softmax_cuda`` (built from Megatron-LM's sources, not in the megatron-core
    wheel) and fails the first forward with ModuleNotFoundError on an H200 when it is on.
    """
    shape = cfg.model
    recompute = None if cfg.recompute == "none" else cfg.recompute
    return TransformerConfig(
        num_layers=shape.n_layers,
        hidden_size=shape.dim,
        num_attention_heads=shape.n_heads,
        num_query_groups=shape.n_kv_heads,
        kv_channels=shape.head_dim,
        ffn_hidden_size=shape.ffn_dim,
        normalization="RMSNorm",
        layernorm_epsilon=shape.norm_eps,
        gated_linear_unit=True,
        activation_func=functional.silu,
        add_bias_linear=False,
        add_qkv_bias=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        init_method_std=0.02,
        tensor_model_parallel_size=cfg.tp,
        pipeline_model_parallel_size=cfg.pp,
        sequence_parallel=cfg.sequence_parallel == "true",
        bf16=True,
        params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16,
        bias_activation_fusion=False,
        masked_softmax_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        persist_layer_norm=False,
        recompute_granularity=recompute,
        recompute_method="uniform" if recompute == "full" else None,
        recompute_num_layers=1 if recompute == "full" else None,
        use_cpu_initialization=cpu_init,
    )


def gpt_model(cfg: TrainConfig, config: TransformerConfig) -> GPTModel:
    """This rank's pipeline stage of GPTModel with the local spec, RoPE with Llama-3's long-context scaling.

    megatron-core's ``rope_scaling`` is the Llama-3 rule with low/high frequency factors 1 and 4 and 8192
    original positions, which are every scaled shape's values here (checked); only the factor varies.
    """
    shape = cfg.model
    scaling = shape.rope_scaling or {}
    fixed = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192.0}
    if any(scaling.get(key, value) != value for key, value in fixed.items()):
        raise ValueError(f"{cfg.config}'s RoPE scaling {scaling} is not megatron-core's Llama-3 rule")
    return GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
        vocab_size=shape.vocab_size,
        max_sequence_length=cfg.seq_len,
        pre_process=parallel_state.is_pipeline_first_stage(),
        post_process=parallel_state.is_pipeline_last_stage(),
        share_embeddings_and_output_weights=shape.tie_embeddings,
        position_embedding_type="rope",
        rotary_base=int(shape.rope_theta),
        rope_scaling=bool(scaling),
        rope_scaling_factor=float(scaling.get("factor", 8.0)),
    )


def count_params(model: nn.Module) -> int:
    """Unique parameters of the whole model, summed over the tensor and pipeline ranks' shares.

    A tied output layer holds no weight of its own on a one-stage model; across stages megatron-core keeps a
    copy of the embedding on the last stage, counted once here (as the FLOP formula counts it).
    """
    local = sum(p.numel() for p in model.parameters())
    tp = parallel_state.get_tensor_model_parallel_world_size()
    if tp * parallel_state.get_pipeline_model_parallel_world_size() == 1:
        return local
    return _sum_over_model_parallel(local, model)


def _sum_over_model_parallel(local: int, model: nn.Module) -> int:
    """Shares of TP-split weights add up; replicated ones (norms) and the tied copy are counted once."""
    replicated = sum(p.numel() for p in model.parameters() if not getattr(p, "tensor_model_parallel", False))
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    share = local - (replicated if tp_rank else 0)
    stage_copy = _tied_copy(model)
    if stage_copy is not None and not parallel_state.is_pipeline_first_stage():
        share -= stage_copy
    total = torch.tensor([share], dtype=torch.int64, device=_collective_device())
    torch.distributed.all_reduce(total, group=parallel_state.get_model_parallel_group())
    return int(total.item())


def _tied_copy(model: nn.Module) -> int | None:
    """Elements of the last stage's copy of a tied embedding (None where there is none)."""
    inner = model.module if hasattr(model, "module") else model
    output = getattr(inner, "output_layer", None)
    weight = getattr(output, "weight", None)
    if getattr(inner, "share_embeddings_and_output_weights", False) and weight is not None:
        return int(weight.numel())
    return None


def _collective_device() -> torch.device:
    """Where the process group's backend takes tensors: the current GPU under NCCL, else the CPU.

    Not the model's device: a meta-device model (any shape's count) and a CPU-built one under NCCL (a
    preflight on a GPU node) are counted too.
    """
    if torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def optimizer_config(cfg: TrainConfig) -> OptimizerConfig:
    """Adam with decoupled weight decay (AdamW), bf16 model, fp32 master weights and gradients."""
    return OptimizerConfig(
        optimizer="adam",
        lr=cfg.lr,
        min_lr=cfg.lr * cfg.min_lr_ratio,
        weight_decay=cfg.weight_decay,
        adam_beta1=0.9,
        adam_beta2=0.95,
        adam_eps=1e-8,
        clip_grad=cfg.grad_clip,
        bf16=True,
        params_dtype=torch.bfloat16,
        use_distributed_optimizer=cfg.distributed_optimizer == "true",
    )


def scheduler(cfg: TrainConfig, optimizer: MegatronOptimizer) -> OptimizerParamScheduler:
    """megatron-core's schedule: linear warm-up, cosine decay to ``min_lr`` at the last step, constant wd."""
    return OptimizerParamScheduler(
        optimizer,
        init_lr=0.0,
        max_lr=cfg.lr,
        min_lr=cfg.lr * cfg.min_lr_ratio,
        lr_warmup_steps=cfg.warmup_steps,
        lr_decay_steps=cfg.steps,
        lr_decay_style="cosine",
        start_wd=cfg.weight_decay,
        end_wd=cfg.weight_decay,
        wd_incr_steps=cfg.steps,
        wd_incr_style="constant",
    )


@dataclass
class Built:
    """What the loop steps: the wrapped model, its optimizer and schedule, and the unique parameter count."""

    config: TransformerConfig
    model: DistributedDataParallel
    optimizer: MegatronOptimizer
    scheduler: OptimizerParamScheduler
    params: int


def init_parallel(cfg: TrainConfig, device: torch.device) -> None:
    """megatron-core's TP/PP/DP groups over the process group, and its per-rank CUDA RNG streams."""
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=cfg.tp, pipeline_model_parallel_size=cfg.pp
    )
    torch.manual_seed(cfg.seed)
    if device.type == "cuda":
        tensor_parallel.model_parallel_cuda_manual_seed(cfg.seed)


def build_model(cfg: TrainConfig, device: torch.device) -> tuple[TransformerConfig, nn.Module, int]:
    """The bf16 GPTModel stage on ``device``: CPU initialisation there (megatron-core's CPU path)."""
    config = transformer_config(cfg, cpu_init=device.type == "cpu")
    model = gpt_model(cfg, config)
    params = count_params(model)
    model = Float16Module(config, model)
    if device.type == "cuda":
        model.cuda(device)
    return config, model, params


def meta_model(cfg: TrainConfig) -> GPTModel:
    """This rank's GPTModel stage on the meta device: its exact parameters, no memory, no initialisation.

    What a CPU can check of any shape (the 8B one included) after ``init_parallel``: the module tree and the
    parameter count that the FLOP formula uses. Initialisation stays on (on the meta device it computes
    nothing): megatron-core 0.16.1 marks a weight as split over the tensor-parallel ranks only while
    initialising it, and :func:`count_params` reads that mark (without it, a TP=2 count came out halved).
    """
    config = transformer_config(cfg, cpu_init=True)
    with torch.device("meta"):
        return gpt_model(cfg, config)


def build(cfg: TrainConfig, device: torch.device) -> Built:
    """Groups, model, DDP, optimizer, schedule; the hooks megatron-core's schedules call are set here."""
    init_parallel(cfg, device)
    config, model, params = build_model(cfg, device)
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True,
        overlap_grad_reduce=False,
        use_distributed_optimizer=cfg.distributed_optimizer == "true",
    )
    wrapped = DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)
    optimizer = get_megatron_optimizer(optimizer_config(cfg), [wrapped])
    # What forward_backward_func calls: gradient all-reduce (and the tied embedding's) after the last
    # micro-batch, no gradient sync for the ones before it.
    config.finalize_model_grads_func = finalize_model_grads
    config.no_sync_func = wrapped.no_sync
    return Built(config, wrapped, optimizer, scheduler(cfg, optimizer), params)


def accelerators() -> dict[str, bool]:
    """Which optional kernels' packages the machine has (the summary says what ran)."""
    return {name: importlib.util.find_spec(name) is not None for name in ("transformer_engine", "apex")}


def stats_device(model: Any) -> torch.device:
    """Where this rank's tensors live (loss reductions go there)."""
    return next(model.parameters()).device
