#!/usr/bin/env python3
"""Training throughput on one GPU: Hugging Face LlamaForCausalLM against trainstack's pytorch/fsdp model.

Why one script and one run: the comparison is only fair when every variant sees the same GPU, the same
software, the same config, batch and synthetic data, and the same FLOP count. Each variant runs in its own
child process (a crash or an out-of-memory error in one does not end the others, and each starts with an
empty allocator), and the parent writes one JSON with all of them.

Variants (every ``hf_*`` and ``titan`` row is a baseline; the JSON names the fastest and ours' ratio to it):
  hf_eager    LlamaForCausalLM, fp32 weights, torch.autocast(bf16), AdamW (default, foreach).
  hf_fsdp2    the same model wrapped the way the usual FSDP test cases do: fully_shard per decoder layer and
              root, MixedPrecisionPolicy(bf16 params, fp32 reduce), no autocast.
  hf_compile  hf_eager under torch.compile (whole model).
  hf_eager_fused, hf_compile_fused
              the same with AdamW(fused=True): PyTorch's fastest AdamW, the strongest plain setting.
  hf_liger, hf_liger_compile
              hf_eager_fused / hf_compile_fused with Liger's Triton kernels patched into the Llama classes
              (``apply_liger_kernel_to_llama``: RMSNorm, RoPE, SwiGLU, fused linear cross-entropy).
  titan       torchtitan's Llama-3 ``Transformer`` at the same shape (embedding tied like the 1B checkpoint),
              set up as torchtitan's trainer does on one GPU: fp32 weights under autocast(bf16), each block
              compiled, the loss compiled, AdamW(fused=True), gradient clipping.
  titan_ac    titan with each block wrapped for full activation checkpointing before its compile, as
              torchtitan's ``activation_checkpoint.mode = "full"`` does (the 8B shape needs checkpointing on
              one GPU).
  titan_sac   titan with every second block checkpointed (torchtitan's layer-wise selective mode).
  ours        testcases/pytorch/fsdp exactly as its entrypoint builds it for one process (per-block
              compile, fused linear cross-entropy, bf16 parameters over fp32 master weights updated by
              one compiled AdamW kernel per tensor; FSDP2 only shards when there are several processes),
              the SDPA backend chosen by a quick probe. ``--ours-variant fsdp:fsdp=true`` runs the same
              model through FSDP2 on the one GPU (fused AdamW on its fp32 shards), to show what it costs.
  ours_<tag>  ours with TrainConfig overrides (``--ours-variant tag:key=value,key=value``), for ablations.

FLOPs per token, the same for every variant: ``6 * N + 12 * n_layers * dim * seq_len`` (N = unique
parameters, a tied embedding counted once; the attention term counts both seq x seq products forward and
backward without the causal half). MFU = tokens/s x FLOPs per token / the GPU's dense bf16 peak, read from the
instance catalog for ``--instance-type`` (the catalog type whose GPU this machine has; default p5en.48xlarge,
an H200) by bench/catalog_peak.py, or given as ``--peak-tflops``; the JSON records both. Timing: wall time
per step with one host synchronisation at its end (the loss value), over the steps after ``--warmup``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tarfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from trainstack_train.config import TrainConfig

from bench import catalog_peak, floor, train_report

ROOT = Path(__file__).resolve().parents[1]

RESULT_PREFIX = "BENCH_RESULT "
# Hugging Face variants: (torch.compile of the whole model, fused AdamW, Liger kernels).
HF_VARIANTS: dict[str, tuple[bool, bool, bool]] = {
    "hf_eager": (False, False, False),
    "hf_fsdp2": (False, False, False),
    "hf_compile": (True, False, False),
    "hf_eager_fused": (False, True, False),
    "hf_compile_fused": (True, True, False),
    "hf_liger": (False, True, True),
    "hf_liger_compile": (True, True, True),
}
# torchtitan rows: titan as its one-GPU trainer sets it up; titan_ac the same with full activation
# checkpointing of every block (torchtitan's ``--activation_checkpoint.mode full``) and titan_sac with every
# second block checkpointed (its layer-wise selective mode, ``selective_ac_option 2``), for shapes that need
# them. The value is K: blocks whose index is a multiple of K are checkpointed (0: none).
TITAN_VARIANTS: dict[str, int] = {"titan": 0, "titan_ac": 1, "titan_sac": 2}
BASELINES = (*HF_VARIANTS, *TITAN_VARIANTS)
DEFAULT_VARIANTS = ",".join((*HF_VARIANTS, "titan", "ours"))
# Ranges the profiler records on the GPU timeline next to the kernels they contain: not kernels themselves.
ANNOTATIONS = ("FSDP::", "Optimizer.", "ProfilerStep", "## ")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """CLI; ``--child`` is internal (the parent passes one variant's JSON spec)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default="llama3_2_1b")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=14)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--variants", default=DEFAULT_VARIANTS)
    parser.add_argument(
        "--ours-variant",
        action="append",
        default=[],
        help="tag:key=value,key=value (TrainConfig keys; batch_size=N runs that variant at N only)",
    )
    parser.add_argument("--ours-override", default="", help="key=value,... applied to every ours* variant")
    parser.add_argument(
        "--batch-ladder", default="", help="try these batch sizes in order; keep the first fit"
    )
    parser.add_argument(
        "--profile", action="store_true", help="profile 2 more steps of every variant after its timing"
    )
    parser.add_argument(
        "--floor",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time the step's GEMMs and attention alone first (bench/floor.py); each row is set against them",
    )
    parser.add_argument("--timeout", type=int, default=300, help="seconds per child process")
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "train_throughput.json")
    parser.add_argument("--log-tar", type=Path, default=None, help="tar.gz of every child's log")
    parser.add_argument(
        "--device", default="cuda", help="cpu only to smoke-test this script on a tiny config"
    )
    parser.add_argument("--log-dir", type=Path, default=None, help="child logs (default: beside --output)")
    parser.add_argument(
        "--titan-path",
        default="",
        help="import path put first for torchtitan's rows only (its lock's pins, e.g. huggingface_hub 2.x, "
        "would break the Hugging Face rows' transformers if every row had them)",
    )
    parser.add_argument(
        "--instance-type",
        default=catalog_peak.DEFAULT_INSTANCE_TYPE,
        help="catalog instance type whose GPU this machine has: MFU is against its bf16_dense_flops",
    )
    parser.add_argument(
        "--peak-tflops", type=float, default=None, help="dense bf16 peak per GPU, instead of the catalog's"
    )
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# ---------------------------------------------------------------------------------------------- child side
def _overrides(text: str) -> dict[str, str]:
    pairs = [item.split("=", 1) for item in text.split(",") if item]
    return {key.strip().replace("-", "_"): value.strip() for key, value in pairs}


def _train_config(spec: dict[str, Any]) -> Any:
    base = TrainConfig(
        config=spec["config"],
        steps=spec["steps"] + (2 if spec.get("profile") else 0),
        batch_size=spec["batch_size"],
        seq_len=spec["seq_len"],
        warmup_steps=2,
        lr=3e-4,
        device=spec["device"],
        compile="true" if spec["device"] == "cuda" else "false",
        metric_warmup_steps=spec["warmup"],
        peak_tflops=spec["peak_tflops"],
    )
    for key, value in spec.get("overrides", {}).items():
        current = getattr(base, key)
        setattr(base, key, type(current)(value))
    base.validate()
    return base


def _summarise(times: list[float], losses: list[float], spec: dict[str, Any], flops_token: float) -> dict:
    import torch

    window = times[spec["warmup"] :] or times
    tokens = spec["batch_size"] * spec["seq_len"]
    tokens_per_s = tokens * len(window) / sum(window)
    cuda = spec["device"] == "cuda"
    peak = spec["peak_tflops"] if cuda else None
    tflops = tokens_per_s * flops_token / 1e12
    stamps = spec.get("_step_end_unix", [])
    # Wall-clock (Unix) bounds of the timed steps, to match them with the GPU's power samples.
    bounds = [stamps[spec["warmup"] - 1], stamps[-1]] if len(stamps) > spec["warmup"] >= 1 else None
    return {
        "timed_window_unix": bounds,
        "tokens_per_s": tokens_per_s,
        "tflops_per_gpu": tflops,
        "mfu": tflops / peak if peak else None,
        "peak_mem_gb": torch.cuda.max_memory_allocated() / 1e9 if cuda else None,
        "step_time_median_s": sorted(window)[len(window) // 2],
        "first_step_s": times[0],
        "step_times_s": times,
        "losses": losses,
        "flops_per_token": flops_token,
    }


def _profile(
    step_fn: Any, first_step: int, out_dir: Path, tag: str, finish: Any | None = None
) -> dict[str, Any]:
    """Two profiled steps: kernel time by category against wall time shows where the step goes.

    Every variant is profiled the same way, so that each one's step splits into the floor's parts (GEMM,
    attention, the rest; bench/floor.py) and the comparison says which part a faster variant wins on.
    ``finish`` flushes a step function that returns before its work is read (ours); the baselines' step
    functions need only the synchronize.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    if torch.cuda.is_available():
        torch.cuda.synchronize()
    started = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for step in range(first_step, first_step + 2):
            step_fn(step)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    if finish is not None:
        finish(timed=False)
    wall = (time.perf_counter() - started) / 2
    categories: dict[str, float] = {}
    kernels: list[tuple[str, float]] = []
    for evt in prof.key_averages():
        annotation = getattr(evt, "is_user_annotation", False) or evt.key.startswith(ANNOTATIONS)
        if evt.device_type != torch.autograd.DeviceType.CUDA or annotation:
            continue
        micro = getattr(evt, "self_device_time_total", None) or getattr(evt, "self_cuda_time_total", 0.0)
        kernels.append((evt.key, micro / 2 / 1e3))
        name = evt.key.lower()
        category = next(
            (
                label
                for label, words in (
                    ("attention", ("flash", "fmha", "cudnn", "attention", "sdpa")),
                    ("matmul", ("gemm", "xmma", "cutlass", "nvjet", "matmul", "sm90")),
                    ("optimizer", ("adam", "multi_tensor")),
                    ("nccl", ("nccl",)),
                    ("triton_fused", ("triton",)),
                    ("copy_cast", ("copy", "cast", "memcpy", "memset", "fill")),
                )
                if any(word in name for word in words)
            ),
            "other",
        )
        categories[category] = categories.get(category, 0.0) + micro / 2 / 1e3
    kernels.sort(key=lambda item: -item[1])
    table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=40)
    (out_dir / f"profile_{tag}.txt").write_text(table, encoding="utf-8")
    busy = sum(categories.values())
    return {
        "step_wall_ms": wall * 1e3,
        "kernel_ms_per_step": busy,
        "gpu_idle_ms_per_step": wall * 1e3 - busy,
        "by_category_ms": dict(sorted(categories.items(), key=lambda item: -item[1])),
        "top_kernels_ms": kernels[:25],
    }


def _tag(spec: dict[str, Any]) -> str:
    """A variant's file tag: its name and batch (a ladder runs one name at several batches)."""
    return f"{spec['name']}_b{spec['batch_size']}"


def _profile_baseline(spec: dict[str, Any], step_fn: Any, result: dict[str, Any]) -> None:
    """Two more steps of a baseline under the profiler, after its timed steps, when the run asks."""
    if spec.get("profile"):
        result["profile"] = _profile(step_fn, spec["steps"], Path(spec["log_dir"]), _tag(spec))


def _timed_steps(trainer: Any, steps: int) -> tuple[list[Any], list[float]]:
    """Run the steps; also return, per step, the host's time to queue it (the step minus its wait).

    A step's host time near its GPU time means the host, not the GPU, sets the pace: the GPU then idles
    whenever the host is late (a collection, a slow guard). The wait is the read of the previous step's loss.
    """
    waits: list[float] = []
    finish = trainer.finish

    def timed_finish(timed: bool = True) -> Any:
        started = time.perf_counter()
        record = finish(timed)
        waits.append(time.perf_counter() - started)
        return record

    trainer.finish = timed_finish
    records, host = [], []
    stamps = trainer.step_end_unix = []
    for step in range(steps):
        started = time.perf_counter()
        records.append(trainer.step(step))
        # The record that came back is the previous step's, finished at its read inside this call.
        stamps.append(time.time())
        host.append(time.perf_counter() - started - waits[-1])
    trainer.finish = finish
    return records, host


def run_ours(spec: dict[str, Any]) -> dict[str, Any]:
    """The test case's own Trainer, so the bench measures exactly what the entrypoint runs."""
    import torch
    from trainstack_train.loop import Trainer
    from trainstack_train.parallel import configure_attention, init_distributed

    cfg = _train_config(spec)
    info = init_distributed(cfg.device)
    torch.manual_seed(cfg.seed)
    configure_attention(cfg.attn_backend)
    if info.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    built = time.perf_counter()
    trainer = Trainer(cfg, info)
    build_s = time.perf_counter() - built
    records, host = _timed_steps(trainer, spec["steps"])
    records.append(trainer.finish(timed=False))
    # Step k's record arrives with call k + 1: its end is the stamp of the next call (the flush for the last).
    spec["_step_end_unix"] = trainer.step_end_unix[1:]
    done = [record for record in records if record is not None]
    # The final flush times only the tail of the last step (nothing was queued behind it): left out.
    times = [record["step_time_s"] for record in done[:-1]]
    losses = [record["loss"] for record in done]
    result = _summarise(times, losses, spec, trainer.flops_token)
    result.update({"params": trainer.model.num_params(), "build_s": build_s, "train_config": vars(cfg)})
    window = sorted(host[spec["warmup"] :] or host)
    result["host_queue_ms_median"] = window[len(window) // 2] * 1e3
    result["host_queue_s"] = host
    if spec.get("profile"):
        log_dir = Path(spec["log_dir"])
        result["profile"] = _profile(trainer.step, spec["steps"], log_dir, _tag(spec), trainer.finish)
    return result


def _hf_model(spec: dict[str, Any]) -> Any:
    import torch
    import transformers
    from trainstack_train.config import MODEL_CONFIGS
    from trainstack_train.hf_compat import hf_config_kwargs

    if HF_VARIANTS[spec["name"]][2]:
        # Patches the transformers Llama classes, so it must precede the model's construction.
        from liger_kernel.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama()
    config = transformers.LlamaConfig(**hf_config_kwargs(MODEL_CONFIGS[spec["config"]]))
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(spec["device"]):
        return transformers.LlamaForCausalLM(config)


def _versions(*names: str) -> dict[str, str | None]:
    """Installed versions of the packages a baseline used (None where one is missing)."""
    from importlib import metadata

    found: dict[str, str | None] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def _train_loop(spec: dict[str, Any], step_fn: Any) -> tuple[list[float], list[float]]:
    """Wall time and loss of each step; ``step_fn(step)`` returns the loss tensor of a finished update."""
    times, losses = [], []
    stamps = spec.setdefault("_step_end_unix", [])
    for step in range(spec["steps"]):
        started = time.perf_counter()
        value = float(step_fn(step).item())
        times.append(time.perf_counter() - started)
        stamps.append(time.time())
        losses.append(value)
    return times, losses


def run_hf(spec: dict[str, Any]) -> dict[str, Any]:
    """Hugging Face in the ways FSDP test cases and users commonly run it (see the module docstring)."""
    import torch
    import transformers
    from trainstack_train.config import MODEL_CONFIGS
    from trainstack_train.data import BatchSource
    from trainstack_train.metrics import flops_per_token
    from trainstack_train.parallel import init_distributed

    compiled, fused, liger = HF_VARIANTS[spec["name"]]
    info = init_distributed(spec["device"])
    if info.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    model = _hf_model(spec)
    params = sum(p.numel() for p in model.parameters())
    autocast = torch.autocast(info.device.type, dtype=torch.bfloat16)
    if spec["name"] == "hf_fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(info.device.type, (info.world_size,))
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        autocast = nullcontext()
    step_model = torch.compile(model) if compiled else model
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=fused or None
    )
    cfg = MODEL_CONFIGS[spec["config"]]
    data = BatchSource("synthetic", cfg.vocab_size, spec["batch_size"], spec["seq_len"], 0, 1, 1234)

    def one_step(step: int) -> Any:
        inputs, _ = data.batch(step, info.device)
        with autocast:
            loss = step_model(input_ids=inputs, labels=inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    times, losses = _train_loop(spec, one_step)
    result = _summarise(times, losses, spec, flops_per_token(cfg, params, spec["seq_len"]))
    result.update({"params": params, "transformers": transformers.__version__})
    _profile_baseline(spec, one_step, result)
    result["setup"] = {"compile": compiled, "adamw": "fused" if fused else "foreach", "liger": liger}
    if liger:
        result["liger_kernel"] = _versions("liger-kernel")["liger-kernel"]
    return result


def _titan_args(spec: dict[str, Any]) -> Any:
    """torchtitan's model arguments for our shape; its FFN rule gives the same width, RoPE our scaling."""
    from torchtitan.models.llama3.model.args import RoPEScalingArgs, TransformerModelArgs
    from trainstack_train.config import MODEL_CONFIGS

    cfg = MODEL_CONFIGS[spec["config"]]
    scaling = cfg.rope_scaling or {}
    rope = RoPEScalingArgs(
        scaling_factor=scaling.get("factor", 1.0),
        low_freq_factor=scaling.get("low_freq_factor", 1.0),
        high_freq_factor=scaling.get("high_freq_factor", 4.0),
        original_max_position_embeddings=int(scaling.get("original_max_position_embeddings", 8192)),
    )
    # multiple_of = ffn_dim and no multiplier: torchtitan rounds int(8 dim / 3) up to ffn_dim exactly.
    args = TransformerModelArgs(
        dim=cfg.dim,
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        n_kv_heads=cfg.n_kv_heads,
        vocab_size=cfg.vocab_size,
        multiple_of=cfg.ffn_dim,
        norm_eps=cfg.norm_eps,
        rope_theta=cfg.rope_theta,
        rope_scaling_args=rope,
        max_seq_len=spec["seq_len"],
    )
    return cfg, args


def run_titan(spec: dict[str, Any]) -> dict[str, Any]:
    """torchtitan's Llama-3 model, wrapped and stepped as torchtitan's trainer does on a single GPU."""
    import torch
    from torchtitan.models.llama3.model.model import Transformer
    from trainstack_train.data import BatchSource
    from trainstack_train.metrics import flops_per_token

    cfg, args = _titan_args(spec)
    device = torch.device(spec["device"])
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with torch.device("meta"):
        model = Transformer(args)
    ffn = model.layers["0"].feed_forward.w1.weight.shape[0]
    if ffn != cfg.ffn_dim:
        raise ValueError(f"torchtitan's FFN width {ffn} is not the shape's {cfg.ffn_dim}")
    if cfg.tie_embeddings:
        model.output.weight = model.tok_embeddings.weight
    every = TITAN_VARIANTS[spec["name"]]
    for name, block in model.layers.named_children():
        if every and int(name) % every == 0:
            # torchtitan's layer-wise AC: the block's activations are recomputed in the backward pass.
            from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

            block = checkpoint_wrapper(block, preserve_rng_state=False)
        model.layers.register_module(name, torch.compile(block, fullgraph=True))
    model.to_empty(device=device)
    if cfg.tie_embeddings:
        model.output.weight = model.tok_embeddings.weight
    with torch.no_grad():
        model.init_weights(buffer_device=device)
    params = sum(p.numel() for p in model.parameters())  # parameters() yields a tied weight once

    @torch.compile
    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))

    optimizer = torch.optim.AdamW(
        model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8, fused=True
    )
    data = BatchSource("synthetic", cfg.vocab_size, spec["batch_size"], spec["seq_len"], 0, 1, 1234)

    def one_step(step: int) -> Any:
        inputs, targets = data.batch(step, device)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = loss_fn(model(inputs), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    times, losses = _train_loop(spec, one_step)
    result = _summarise(times, losses, spec, flops_per_token(cfg, params, spec["seq_len"]))
    result.update({"params": params, **_versions("torchtitan")})
    _profile_baseline(spec, one_step, result)
    result["setup"] = {
        "compile": "per block + loss",
        "adamw": "fused",
        "autocast": "bf16",
        "activation_checkpointing": {0: "none", 1: "full"}.get(every, f"every {every} blocks"),
    }
    return result


def _cuda_ms(fn: Any, repeats: int) -> float:
    """Mean GPU time of ``fn()`` over ``repeats`` calls, after three untimed ones (compile, autotune)."""
    import torch

    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeats


def _sdpa_step(cfg: Any, spec: dict[str, Any], gqa: str) -> Any:
    """One forward+backward of causal attention as ``ours`` runs it with ``--gqa gqa``.

    ``native`` hands SDPA the ``n_kv_heads`` K and V; ``expand`` copies them to ``n_heads`` heads inside the
    timed call, as the model does, so the two modes' times compare what a step pays.
    """
    import torch
    from torch.nn.functional import scaled_dot_product_attention
    from trainstack_train.model import repeat_kv

    batch, seq, heads, kv_heads = spec["batch_size"], spec["seq_len"], cfg.n_heads, cfg.n_kv_heads
    options = {"device": "cuda", "dtype": torch.bfloat16, "requires_grad": True}
    q = torch.randn((batch, heads, seq, cfg.head_dim), **options)
    k, v = (torch.randn((batch, kv_heads, seq, cfg.head_dim), **options) for _ in range(2))
    grad = torch.randn_like(q)
    repeat = heads // kv_heads

    def step() -> None:
        if gqa == "expand" and repeat > 1:
            scaled_dot_product_attention(
                q, repeat_kv(k, repeat), repeat_kv(v, repeat), is_causal=True
            ).backward(grad)
        else:
            scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=repeat > 1).backward(grad)

    return step


def run_attention_probe(spec: dict[str, Any]) -> dict[str, Any]:
    """Forward+backward time of causal SDPA at the config's shape, per backend and GQA mode.

    The backend picked for ``ours`` is the fastest for the GQA mode it runs (``spec["gqa"]``); the other
    mode's times are kept beside it.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from trainstack_train.config import GQA_MODES, MODEL_CONFIGS

    cfg = MODEL_CONFIGS[spec["config"]]
    timings: dict[str, dict[str, float | str]] = {}
    for mode in GQA_MODES:
        step = _sdpa_step(cfg, spec, mode)
        timings[mode] = {}
        for label, backend in (
            ("flash", SDPBackend.FLASH_ATTENTION),
            ("cudnn", SDPBackend.CUDNN_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION),
        ):
            try:
                with sdpa_kernel([backend]):
                    timings[mode][label] = _cuda_ms(step, 10)
            except RuntimeError as err:
                timings[mode][label] = f"unavailable: {str(err).splitlines()[0][:160]}"
    numeric = {key: value for key, value in timings[spec["gqa"]].items() if isinstance(value, float)}
    causal_flops = 4 * spec["batch_size"] * cfg.n_heads * spec["seq_len"] ** 2 * cfg.head_dim / 2 * 3.5
    return {
        "gqa": spec["gqa"],
        "fwd_bwd_ms": timings,
        "best": min(numeric, key=numeric.get) if numeric else "auto",
        "note": "fwd+bwd of causal attention (expand: with the K/V copies); TFLOP/s uses causal FLOPs with "
        "bwd = 2.5x fwd",
        "tflops": {
            mode: {key: causal_flops / (ms / 1e3) / 1e12 for key, ms in row.items() if isinstance(ms, float)}
            for mode, row in timings.items()
        },
    }


def run_loss_probe(spec: dict[str, Any]) -> dict[str, Any]:
    """Time of one loss chunk (logits in, loss and logit-gradient out) per kernel, at the config's vocabulary.

    The floor is one read of the bf16 logits and one write of their gradient at the GPU's memory bandwidth:
    the chunk does no other work worth counting.
    """
    import torch
    from trainstack_train.config import MODEL_CONFIGS
    from trainstack_train.loss import LOSS_KERNELS, chunk_function

    cfg = MODEL_CONFIGS[spec["config"]]
    rows = 4096
    gen = torch.Generator(device="cuda").manual_seed(0)
    logits = torch.randn(rows, cfg.vocab_size, device="cuda", generator=gen).mul_(3).bfloat16()
    targets = torch.randint(0, cfg.vocab_size, (rows,), device="cuda", generator=gen)
    scale = torch.tensor(1.0 / rows, device="cuda")
    timings = {
        kernel: _cuda_ms(lambda k=kernel: chunk_function(k)(logits, targets, scale), 20)
        for kernel in LOSS_KERNELS
    }
    moved = 2 * logits.numel() * logits.element_size()
    return {
        "chunk_rows": rows,
        "vocab": cfg.vocab_size,
        "ms_per_chunk": timings,
        "bytes_read_once_written_once": moved,
    }


def _gemm_fn(gemm: floor.Gemm) -> Any:
    """The GEMM with the operand layouts nn.Linear's autograd uses (x W^T forward, g W and g^T x backward)."""
    import torch
    from torch.nn.functional import linear

    options = {"device": "cuda", "dtype": torch.bfloat16}
    kind = gemm.name.rsplit(".", 1)[1]
    if kind == "fwd":
        x, w = torch.randn(gemm.m, gemm.k, **options), torch.randn(gemm.n, gemm.k, **options)
        return lambda: linear(x, w)
    if kind == "dgrad":
        g, w = torch.randn(gemm.m, gemm.k, **options), torch.randn(gemm.k, gemm.n, **options)
        return lambda: g @ w
    g, x = torch.randn(gemm.k, gemm.m, **options), torch.randn(gemm.k, gemm.n, **options)
    return lambda: g.t() @ x


def _clock_sampler() -> subprocess.Popen | None:
    """nvidia-smi sampling the SM clock and power every 200 ms while the probe runs (None without it)."""
    try:
        return subprocess.Popen(
            [
                "nvidia-smi",
                "--query-gpu=clocks.sm,power.draw,power.limit",
                "--format=csv,noheader,nounits",
                "-lms",
                "200",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
    except OSError:
        return None


def _clock_record(sampler: subprocess.Popen | None) -> dict[str, Any]:
    """Median SM clock and power over the probe, and the power limit, from the sampler's lines."""
    if sampler is None:
        return {"error": "nvidia-smi not found"}
    sampler.terminate()
    out, _ = sampler.communicate(timeout=10)
    rows = []
    for line in out.splitlines():
        try:
            rows.append([float(part) for part in line.split(",")])
        except ValueError:
            continue
    if not rows:
        return {"error": "no samples"}

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    return {
        "samples": len(rows),
        "sm_clock_mhz_median": median([r[0] for r in rows]),
        "power_w_median": median([r[1] for r in rows]),
        "power_limit_w": rows[-1][2],
    }


def run_floor_probe(spec: dict[str, Any]) -> dict[str, Any]:
    """Every GEMM of one step timed alone (cuBLAS, steady state) and attention with its fastest backend,
    summed (bench/floor.py); then the same work back to back, and the clocks the power cap allowed."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from trainstack_train.config import MODEL_CONFIGS

    cfg = MODEL_CONFIGS[spec["config"]]
    gemms = floor.step_gemms(cfg, spec["batch_size"] * spec["seq_len"])
    sampler = _clock_sampler()
    calls = {g.name: _gemm_fn(g) for g in gemms}
    gemm_ms = {name: _cuda_ms(fn, 20) for name, fn in calls.items()}
    attention = _sdpa_step(cfg, spec, spec["gqa"])
    backends = {}
    for label, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel([backend]):
                backends[label] = _cuda_ms(attention, 10)
        except RuntimeError as err:
            backends[label] = f"unavailable: {str(err).splitlines()[0][:160]}"
    timed = {k: v for k, v in backends.items() if isinstance(v, float)}
    best = min(timed, key=timed.get)
    result = floor.summary(gemms, gemm_ms, timed[best], cfg.n_layers)
    backend_of = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[best]

    def replay() -> None:
        with sdpa_kernel([backend_of]):
            for gemm in gemms:
                for _ in range(gemm.count):
                    calls[gemm.name]()
            for _ in range(cfg.n_layers):
                attention()

    result["replay_ms"] = _cuda_ms(replay, 3)
    result["attention_backend"] = best
    result["attention_ms_per_layer"] = backends
    result["clocks"] = _clock_record(sampler)
    result["tokens"] = spec["batch_size"] * spec["seq_len"]
    return result


def child_main(spec: dict[str, Any]) -> None:
    """Run one variant and print its result line; exceptions become an ``ok: false`` result."""
    os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    try:
        if spec["name"] == "attention_probe":
            result = run_attention_probe(spec)
        elif spec["name"] == "loss_probe":
            result = run_loss_probe(spec)
        elif spec["name"] == "floor_probe":
            result = run_floor_probe(spec)
        elif spec["name"] in HF_VARIANTS:
            result = run_hf(spec)
        elif spec["name"] in TITAN_VARIANTS:
            result = run_titan(spec)
        else:
            result = run_ours(spec)
        result["ok"] = True
    except Exception as err:  # the parent records the failure (OOM included) and goes on
        result = {"ok": False, "error": f"{type(err).__name__}: {str(err)[:600]}"}
    result["name"] = spec["name"]
    result["batch_size"] = spec["batch_size"]
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


# --------------------------------------------------------------------------------------------- parent side
def _child_env(spec: dict[str, Any], titan_path: str) -> dict[str, str] | None:
    """The child's environment: this process's, with ``titan_path`` first on a torchtitan row's path."""
    if not titan_path or spec["name"] not in TITAN_VARIANTS:
        return None
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(item for item in (titan_path, env.get("PYTHONPATH", "")) if item)
    return env


def launch(spec: dict[str, Any], timeout: int, log_dir: Path, titan_path: str = "") -> dict[str, Any]:
    """One child process; its whole output goes to a log, its result line is parsed."""
    log = log_dir / f"{spec['name']}_b{spec['batch_size']}.log"
    # The child finds bench and trainstack_train as this process did (working directory, PYTHONPATH or the
    # editable install of testcases/common).
    cmd = [sys.executable, "-m", "bench.train_throughput", "--child", json.dumps(spec)]
    env = _child_env(spec, titan_path)
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, env=env)
        output = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as err:
        output = (err.stdout or b"").decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        output += f"\nTIMEOUT after {timeout}s\n"
    log.write_text(output, encoding="utf-8")
    lines = [line for line in output.splitlines() if line.startswith(RESULT_PREFIX)]
    if lines:
        result = json.loads(lines[-1][len(RESULT_PREFIX) :])
    else:
        result = {"name": spec["name"], "ok": False, "error": "no result line: " + output[-600:]}
    result["wall_s"] = time.perf_counter() - started
    return result


def environment() -> dict[str, Any]:
    """What the numbers were measured on."""
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    # nvidia-smi stamps its samples in local time: the offset turns them into Unix time.
    info["utc_offset_s"] = time.localtime().tm_gmtoff
    if torch.cuda.is_available():  # the parent never touches the GPU beyond this query
        info["gpu"] = torch.cuda.get_device_name()
        info["gpus"] = torch.cuda.device_count()
    info.update(_versions("transformers", "liger-kernel", "torchtitan", "torchao", "triton"))
    return info


def _host_column(result: dict[str, Any]) -> str:
    host = result.get("host_queue_ms_median")
    return f"  host {host:5.1f} ms/step" if host is not None else ""


def _row(result: dict[str, Any]) -> str:
    if not result.get("ok"):
        return (
            f"{result['name']:<16} b{result.get('batch_size', '?'):<3} FAILED {result.get('error', '')[:90]}"
        )
    return (
        f"{result['name']:<16} b{result['batch_size']:<3} {result['tokens_per_s']:>10,.0f} tok/s "
        f"{result['tflops_per_gpu']:>7.1f} TFLOP/s  MFU {100 * (result['mfu'] or 0):5.1f} %  "
        f"peak {result['peak_mem_gb'] or 0:6.1f} GB" + _host_column(result)
    )


def resolve_peak(args: argparse.Namespace) -> tuple[float, str]:
    """The MFU denominator and where it came from; checked before any child process takes the GPU."""
    if args.peak_tflops is None:
        peak = catalog_peak.peak_tflops(args.instance_type)
        return peak, f"stacks/instance_types.yml {args.instance_type} bf16_dense_flops"
    if not (math.isfinite(args.peak_tflops) and args.peak_tflops > 0):
        raise catalog_peak.PeakError(f"--peak-tflops must be a finite number > 0, got {args.peak_tflops}")
    return args.peak_tflops, "--peak-tflops"


def parent_main(args: argparse.Namespace) -> int:
    """Probe attention, run every variant, write the JSON and print a table."""
    try:
        peak, peak_source = resolve_peak(args)
    except catalog_peak.PeakError as err:
        print(f"train_throughput: {err}", file=sys.stderr)
        return 2
    log_dir = args.log_dir or args.output.parent / f"logs_{args.config}"
    log_dir.mkdir(parents=True, exist_ok=True)
    base = {
        "config": args.config,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "steps": args.steps,
        "warmup": args.warmup,
        "log_dir": str(log_dir),
        "device": args.device,
        "peak_tflops": peak,
    }
    shared = _overrides(args.ours_override)
    # The probe times the GQA mode ours runs; auto resolves to native unless the backend is efficient.
    chosen = TrainConfig(gqa=shared.get("gqa", "auto"), attn_backend=shared.get("attn_backend", "auto"))
    base["gqa"] = chosen.gqa_mode
    probe: dict[str, Any] = {"ok": False, "error": "not run: cpu, or --ours-override names attn_backend"}
    if args.device == "cuda" and "attn_backend" not in shared:
        probe = launch({**base, "name": "attention_probe"}, args.timeout, log_dir)
    shared.setdefault("attn_backend", probe.get("best", "auto") if probe.get("ok") else "auto")
    loss_probe: dict[str, Any] = {"ok": False, "error": "not run: cpu"}
    floor_probe: dict[str, Any] = {"ok": False, "error": "not run: cpu, or --no-floor"}
    if args.device == "cuda":
        loss_probe = launch({**base, "name": "loss_probe"}, args.timeout, log_dir)
        if args.floor:
            floor_probe = launch({**base, "name": "floor_probe"}, args.timeout, log_dir)
    specs: list[dict[str, Any]] = []
    for name in [item for item in args.variants.split(",") if item]:
        overrides = shared if name == "ours" else {}
        specs.append({**base, "name": name, "overrides": overrides, "profile": args.profile})
    ladder = [int(b) for b in args.batch_ladder.split(",") if b] or [args.batch_size]
    for item in args.ours_variant:
        tag, _, text = item.partition(":")
        overrides = {**shared, **_overrides(text)}
        # A variant's own batch_size replaces the ladder for it (the 8B shape's bf16-state recipe fits 48).
        batches = [int(overrides.pop("batch_size"))] if "batch_size" in overrides else ladder
        specs.append(
            {
                **base,
                "name": f"ours_{tag}",
                "overrides": overrides,
                "batches": batches,
                "profile": args.profile,
            }
        )
    results: list[dict[str, Any]] = []
    context = {
        "peak": peak,
        "peak_source": peak_source,
        "attention_probe": probe,
        "loss_probe": loss_probe,
        "floor_probe": floor_probe,
    }
    for spec in specs:
        for batch in spec.pop("batches", ladder):
            result = launch({**spec, "batch_size": batch}, args.timeout, log_dir, args.titan_path)
            results.append(result)
            print(_row(result), flush=True)
            # Written after every row: a run stopped from outside still leaves the rows it finished.
            _write(args, _document(args, context, results, complete=False))
            if result.get("ok"):
                break
    document = _document(args, context, results, complete=True)
    document["plot"] = _plot(document, args.output.with_suffix(".png"))
    _write(args, document)
    if args.log_tar:
        with tarfile.open(args.log_tar, "w:gz") as tar:
            tar.add(log_dir, arcname=log_dir.name)
    print("\n".join(_row(r) for r in results))
    print(train_report.table(document).splitlines()[-1])
    return 0


def _document(
    args: argparse.Namespace, context: dict[str, Any], results: list[dict[str, Any]], complete: bool
) -> dict[str, Any]:
    """The run's JSON: environment, method, probes, every row, and the comparison against the baselines."""
    peak = context["peak"]
    return {
        "benchmark": "train_throughput",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "complete": complete,
        "environment": _with_row_versions(environment(), results),
        "config": args.config,
        "seq_len": args.seq_len,
        "timed_steps": args.steps - args.warmup,
        "warmup": args.warmup,
        "flop_formula": f"6*N + 12*n_layers*dim*seq_len per token (N = unique params); MFU vs {peak} TFLOP/s",
        "peak_tflops": peak,
        "peak_source": context["peak_source"],
        "attention_probe": context["attention_probe"],
        "loss_probe": context["loss_probe"],
        "floor_probe": context["floor_probe"],
        "results": results,
        "comparison": train_report.comparison(results),
        "against_floor": floor.against_floor(results, context["floor_probe"], args.batch_size),
    }


def _with_row_versions(env: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
    """torchtitan's version as its rows found it: with ``--titan-path`` only they can import it."""
    found = [row["torchtitan"] for row in results if row.get("torchtitan")]
    return {**env, "torchtitan": found[0]} if found else env


def _write(args: argparse.Namespace, document: dict[str, Any]) -> None:
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


def _plot(document: dict[str, Any], target: Path) -> str:
    """Draw the PNG beside the JSON; without matplotlib the JSON says so and the run still counts."""
    try:
        train_report.plot(document, target)
    except ImportError as err:
        return f"not drawn: {err}"
    return target.name


def main() -> int:
    """Dispatch to the child or the parent side."""
    args = parse_args()
    if args.child:
        child_main(json.loads(args.child))
        return 0
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
