"""accelerate around the model: FSDP2, mixed precision, steps, checkpoints, evaluation and the summary.

accelerate prepares the model and optimizer (FSDP2 through its ``FullyShardedDataParallelPlugin`` when several
processes share the model, the plain model on one process), runs the backward, clips the gradients and saves
and loads the whole state (``save_state``/``load_state``: model shards, optimizer, the learning-rate schedule
and the random states). What is read and printed is ``pytorch/fsdp``'s, so the launcher parses every case
alike: a step's loss and gradient norm are read one step later (the host never waits for the device in
between), and the last line and the one before a checkpoint carry the loss with null rates.

Where accelerate needed help: it turns on FSDP only for accelerator backends (``AcceleratorState`` picks
``DistributedType.FSDP`` from ``MULTI_GPU`` and its kin, never from ``MULTI_CPU``), so with gloo on CPU it
would silently fall back to DDP; the case then sets the distributed type to FSDP itself, after which
accelerate's own FSDP2 path (``fully_shard`` per decoder block, sharded checkpoints) runs unchanged.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from accelerate import Accelerator, FullyShardedDataParallelPlugin
from accelerate.state import AcceleratorState, PartialState
from accelerate.utils import DistributedType
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy
from torch.distributed.tensor import DTensor
from trainstack_train.config import ModelConfig
from trainstack_train.metrics import (
    StepTimer,
    Summary,
    finish_run,
    now,
    peak_memory_gb,
    report,
    run_steps,
    step_record,
)
from trainstack_train.parallel import DistInfo, init_distributed

from . import data as hf_data
from .config import TrainConfig
from .model import BLOCK_CLASS, build

TESTCASE = "hf/finetune"
STEP_DIR = "step-{:08d}"
DONE_FILE = "train_state.json"
FLOPS_FORMULA = "4*N_frozen + 6*N_lora + 12*n_layers*dim*seq_len (frozen weights: no weight gradient)"


def precision_of(cfg: TrainConfig, device: torch.device) -> str:
    """``auto``: bf16 on a GPU, fp32 on the CPU."""
    if cfg.precision == "auto":
        return "bf16" if device.type == "cuda" else "fp32"
    return cfg.precision


def fsdp_plugin(precision: str) -> FullyShardedDataParallelPlugin:
    """FSDP2 per decoder block with sharded checkpoints; in bf16, gradients reduced and outputs kept in fp32.

    accelerate's own bf16 policy reduces gradients and casts the model's outputs (the loss) to bf16; the
    policy given here is kept by its ``set_mixed_precision`` and matches pytorch/fsdp's (bf16 parameters
    gathered, fp32 reduction), so a loss line reads in full precision.
    """
    policy = None
    if precision == "bf16":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return FullyShardedDataParallelPlugin(
        fsdp_version=2,
        auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=[BLOCK_CLASS],
        reshard_after_forward=True,
        state_dict_type="SHARDED_STATE_DICT",
        mixed_precision_policy=policy,
    )


def make_accelerator(cfg: TrainConfig, info: DistInfo, precision: str) -> Accelerator:
    """accelerate's Accelerator, with its FSDP2 plugin when the model is sharded (module docstring)."""
    plugin = fsdp_plugin(precision) if cfg.use_fsdp(info.world_size) else None
    mixed = "bf16" if precision == "bf16" else "no"
    accelerator = Accelerator(fsdp_plugin=plugin, mixed_precision=mixed, cpu=info.device.type == "cpu")
    if plugin is not None and accelerator.distributed_type != DistributedType.FSDP:
        AcceleratorState._shared_state["distributed_type"] = DistributedType.FSDP
        AcceleratorState._shared_state["fsdp_plugin"] = plugin
        PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    return accelerator


def latest_checkpoint(directory: str) -> tuple[Path, int] | None:
    """The highest ``step-N`` that rank 0 marked complete, and N."""
    root = Path(directory) if directory else None
    if root is None or not root.is_dir():
        return None
    done = [p for p in root.glob("step-*") if (p / DONE_FILE).is_file()]
    if not done:
        return None
    best = max(done, key=lambda p: int(p.name.removeprefix("step-")))
    return best, int(json.loads((best / DONE_FILE).read_text(encoding="utf-8"))["step"])


class Run:
    """One invocation: the prepared model, optimizer and schedule, the data, the timer and the records."""

    def __init__(self, cfg: TrainConfig, shape: ModelConfig, info: DistInfo) -> None:
        self.cfg, self.shape, self.info = cfg, shape, info
        self.precision = precision_of(cfg, info.device)
        self.accelerator = make_accelerator(cfg, info, self.precision)
        self.tokenizer = hf_data.load_tokenizer(cfg.model_path)
        train_records, eval_records = hf_data.split(hf_data.load_records(cfg.data_file), cfg.eval_fraction)
        order = np.random.default_rng(cfg.seed).permutation(len(train_records))
        train_stream = hf_data.Stream.pack(train_records, self.tokenizer, order)
        eval_stream = hf_data.Stream.pack(eval_records, self.tokenizer)
        hf_data.vocab_check([train_stream, eval_stream], shape.vocab_size)
        self.records = (len(train_records), len(eval_records))
        self.batches = hf_data.Batches(train_stream, cfg.batch_size, cfg.seq_len, info.world_size)
        self.eval_windows = hf_data.eval_windows(eval_stream, cfg.seq_len, self.tokenizer.eos_id)
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float32
        model, self.counts = build(cfg, info.device, dtype)
        optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=cfg.lr, weight_decay=cfg.weight_decay
        )
        from transformers import get_cosine_with_min_lr_schedule_with_warmup

        # Not handed to prepare(): accelerate would step it once per process each step. Saved with the state.
        self.scheduler = get_cosine_with_min_lr_schedule_with_warmup(
            optimizer, cfg.warmup_steps, cfg.steps, min_lr_rate=cfg.min_lr_ratio
        )
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.accelerator.register_for_checkpointing(self.scheduler)
        self.start_step = self._resume()
        self.tokens_per_step = cfg.batch_size * cfg.seq_len * info.world_size
        self.flops_token = self.counts.flops_per_token(shape, cfg.seq_len)
        self.timer = StepTimer(cfg.metric_warmup_steps, self.tokens_per_step)
        self.losses: list[float] = []
        self.pending: tuple[int, torch.Tensor, float] | None = None
        self.clock: float | None = None

    def _resume(self) -> int:
        """accelerate's ``load_state`` of the highest complete checkpoint; the step it was taken at."""
        found = latest_checkpoint(self.cfg.checkpoint_dir)
        if found is None:
            return 0
        self.accelerator.load_state(str(found[0]))
        return found[1]

    def step(self, step: int) -> dict[str, Any] | None:
        """Queue one step; return the record of the previous one (read now, while this one runs)."""
        if self.clock is None:
            self.clock = now()
        ids, labels = (
            torch.from_numpy(a).to(self.info.device) for a in self.batches.rows(step, self.info.rank)
        )
        # Summed over this rank's tokens and divided by the step's token count over the world size: the
        # gradients that FSDP/DDP average over the ranks are those of the step's token mean.
        per_rank = max(1, self.batches.targets(step)) / self.info.world_size
        loss = self.model(input_ids=ids, labels=labels, num_items_in_batch=per_rank).loss
        self.accelerator.backward(loss)
        norm = self.accelerator.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        lr = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        record = self.finish()
        self.pending = (step, self._stats(loss, norm), lr)
        return record

    def _stats(self, loss: torch.Tensor, norm: torch.Tensor | float) -> torch.Tensor:
        """``[step mean loss, grad norm]``, queued on the device now and read a step later."""
        value = loss.detach().float().clone()
        if self.info.world_size > 1:
            dist.all_reduce(value, op=dist.ReduceOp.SUM)
            value /= self.info.world_size
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()  # FSDP2: the norm over every shard, replicated
        norm_t = torch.as_tensor(norm, device=value.device).detach().float()
        return torch.stack((value, norm_t.to(value.device)))

    def finish(self, timed: bool = True) -> dict[str, Any] | None:
        """The queued step's record; ``timed=False`` for a flush (only the tail of the step was timed)."""
        if self.pending is None:
            return None
        step, stats, lr = self.pending
        self.pending = None
        loss_value, grad_norm = stats.tolist()
        rates = (self.info.world_size, self.cfg.peak_tflops)
        return step_record(
            self, step, (loss_value, grad_norm, lr), timed, rates, lambda: peak_memory_gb(self.info.device)
        )

    def save(self, step: int) -> None:
        """accelerate's ``save_state`` into ``step-N``; rank 0 marks it complete once every rank wrote."""
        target = Path(self.cfg.checkpoint_dir) / STEP_DIR.format(step)
        self.accelerator.save_state(str(target))
        self.accelerator.wait_for_everyone()
        if self.info.is_main:
            (target / DONE_FILE).write_text(json.dumps({"step": step}) + "\n", encoding="utf-8")
        self.accelerator.wait_for_everyone()
        self.clock = None

    @torch.no_grad()
    def evaluate(self) -> tuple[float | None, int]:
        """Token-mean loss over the held-out windows, every rank taking its share of ``batch`` rows a pass.

        Each rank runs the same number of forwards (FSDP gathers weights collectively): a rank past the last
        window runs one on a window whose labels are all ignored.
        """
        self.model.eval()
        windows, world, rows = self.eval_windows, self.info.world_size, self.cfg.batch_size
        totals = torch.zeros(2, dtype=torch.float64, device=self.info.device)
        for first in range(0, len(windows), world * rows):
            picked = [first + self.info.rank * rows + j for j in range(rows)]
            chosen = [windows[i] if i < len(windows) else _ignored(windows[0]) for i in picked]
            ids = torch.from_numpy(np.stack([w[0] for w in chosen])).to(self.info.device)
            labels = torch.from_numpy(np.stack([w[1] for w in chosen])).to(self.info.device)
            logits = self.model(input_ids=ids).logits[:, :-1].float()
            targets = labels[:, 1:]
            summed = nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]),
                targets.reshape(-1),
                ignore_index=hf_data.IGNORE,
                reduction="sum",
            )
            totals += torch.stack((summed.double(), (targets != hf_data.IGNORE).sum().double()))
        if world > 1:
            dist.all_reduce(totals, op=dist.ReduceOp.SUM)
        self.model.train()
        loss_sum, count = totals.tolist()
        return (loss_sum / count if count else None), int(count)


def _ignored(window: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """A window with nothing to count, for a rank that has run out of held-out windows."""
    return window[0], np.full_like(window[1], hf_data.IGNORE)


def train(cfg: TrainConfig) -> Summary:
    """Run to ``--steps`` (or ``--max-steps-this-run`` more), evaluate, and write the summary on rank 0."""
    t_start = now()
    shape = cfg.validate()
    info = init_distributed(cfg.device)
    run = Run(cfg, shape, info)
    eval_start = run.evaluate()[0] if run.start_step == 0 else None
    run.clock = None
    last = run_steps(cfg, run, info.is_main, run.save if cfg.checkpoint_dir else None)
    report(run.finish(timed=False), info.is_main)
    eval_loss, eval_tokens = run.evaluate()
    summary = _summary(cfg, info, run, last, t_start, (eval_start, eval_loss, eval_tokens))
    if eval_loss is not None and not math.isfinite(eval_loss):
        raise RuntimeError(f"held-out loss is {eval_loss}: the run diverged")
    return summary


def _summary(
    cfg: TrainConfig,
    info: DistInfo,
    run: Run,
    last: int,
    t_start: float,
    evaluation: tuple[float | None, float | None, int],
) -> Summary:
    import accelerate
    import peft
    import transformers

    eval_start, eval_loss, eval_tokens = evaluation
    return finish_run(
        TESTCASE,
        cfg,
        run,
        info.placement(),
        last=last,
        t_start=t_start,
        params=run.counts.frozen + run.counts.trainable,
        extra={
            "model": cfg.model_path or f"random weights, {cfg.init_config}",
            "config": cfg.init_config or None,
            "eval_loss": eval_loss,
            "eval_loss_before": eval_start,
            "eval_tokens": eval_tokens,
            "records": {"train": run.records[0], "held_out": run.records[1]},
            "tokenizer": run.tokenizer.name,
            "frozen_params": run.counts.frozen,
            "trainable_params": run.counts.trainable,
            "flops_formula": FLOPS_FORMULA,
            "lora_rank": cfg.lora_rank,
            "lora_alpha": cfg.lora_alpha,
            "lora_targets": cfg.lora_targets,
            "fsdp": run.accelerator.distributed_type == DistributedType.FSDP,
            "distributed_type": str(run.accelerator.distributed_type).rsplit(".", 1)[-1],
            "precision": run.precision,
            "gradient_checkpointing": cfg.gradient_checkpointing == "true",
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "accelerate": accelerate.__version__,
            "peft": peft.__version__,
        },
    )
