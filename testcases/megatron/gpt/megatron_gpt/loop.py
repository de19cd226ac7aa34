"""The training loop around megatron-core's objects: resume, step, the metric line, checkpoints, the summary.

One step is megatron-core's: ``get_forward_backward_func()`` runs the micro-batches (through the pipeline
schedule under PP), the DDP wrapper reduces gradients in its fp32 buffer (``finalize_model_grads``), the
optimizer clips and steps (returning the gradient norm), then the schedule steps. Its warm-up starts at
``lr = 0`` on step 1 (megatron-core's rule: the rate after N scheduler steps is N / warm-up of the peak).
What is read and printed is ``pytorch/fsdp``'s, so the launcher parses both cases alike: the loss of a
step is read one step later, and the last line and the one before a checkpoint carry null rates.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.pipeline_parallel import get_forward_backward_func
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
from trainstack_train.parallel import DistInfo, init_distributed

from . import checkpoint
from .build import Built, accelerators, build
from .config import CUDA_ONLY, TrainConfig

TESTCASE = "megatron/gpt"


def micro_batches(
    data: BatchSource, step: int, device: torch.device, count: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The step's batch (pytorch/fsdp's rows for this DP rank) as ``count`` micro-batches, in row order.

    megatron-core's schedules pull one ``(inputs, labels)`` pair per micro-batch from this iterator.
    """
    inputs, labels = data.batch(step, device)
    return iter(zip(inputs.chunk(count), labels.chunk(count), strict=True))


class Trainer:
    """One invocation: megatron-core's model, optimizer and schedule; our data, timer and records."""

    def __init__(self, cfg: TrainConfig, info: DistInfo) -> None:
        self.cfg = cfg
        self.info = info
        self.built: Built = build(cfg, info.device)
        self.position = ReaderPosition()
        self.start_step = self._resume()
        dp_rank = parallel_state.get_data_parallel_rank()
        self.dp_world = parallel_state.get_data_parallel_world_size()
        # Ranks of one data-parallel group read the same rows: TP and PP split a batch, DP the global one.
        self.data = BatchSource(
            cfg.data, cfg.model.vocab_size, cfg.batch_size, cfg.seq_len, dp_rank, self.dp_world, cfg.seed
        )
        self.position.attach(self.data, self.start_step)
        self.tokens_per_step = cfg.batch_size * cfg.seq_len * self.dp_world
        self.flops_token = flops_per_token(cfg.model, self.built.params, cfg.seq_len)
        self.timer = StepTimer(cfg.metric_warmup_steps, self.tokens_per_step)
        self.positions = torch.arange(cfg.seq_len, device=info.device).unsqueeze(0)
        self.forward_backward = get_forward_backward_func()
        self.losses: list[float] = []
        self.pending: tuple[int, torch.Tensor, float, float] | None = None
        self.clock: float | None = None

    def states(self) -> dict[str, Any]:
        """What a checkpoint holds: model stage, optimizer (its shard, under the distributed one), schedule,
        and the data reader's position (``checkpoint.POSITION``).

        megatron-core's own optimizer ``state_dict`` is the whole state without the distributed optimizer;
        with it, the shard is saved by ``checkpoint.OptimizerShards`` (see there why not by megatron-core).
        """
        built = self.built
        if self.cfg.distributed_optimizer == "true":
            optimizer: Any = checkpoint.OptimizerShards(checkpoint.inner_optimizers(built.optimizer))
            key = "optimizer_shards"
        else:
            optimizer, key = built.optimizer, "optimizer"
        states = {"model": built.model.module, key: optimizer, "scheduler": built.scheduler}
        return states | {checkpoint.POSITION: self.position}

    def _resume(self) -> int:
        """The highest complete checkpoint under ``--checkpoint-dir``, or a fresh start (step 0)."""
        if not self.cfg.checkpoint_dir:
            return 0
        root = Path(self.cfg.checkpoint_dir)
        step = checkpoint.latest_step(root)
        if step == 0:
            return 0
        return checkpoint.load(root, step, self.states())

    def save(self, step: int) -> None:
        """Every rank's share; excluded from the next step's time."""
        checkpoint.save(Path(self.cfg.checkpoint_dir), step, self.states())
        self.clock = None

    def _micro_batches(self, step: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return micro_batches(self.data, step, self.info.device, self.cfg.micro_batches())

    def _forward_step(self, data: Iterator[tuple[torch.Tensor, torch.Tensor]], model: Any) -> Any:
        """megatron-core's forward-step contract: the output and the function that turns it into the loss."""
        inputs, labels = next(data)
        output = model(inputs, self.positions, None, labels=labels)

        def loss_func(per_token: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            loss = per_token.float().mean()
            return loss, {"loss": loss.detach()}

        return output, loss_func

    def step(self, step: int) -> dict[str, Any] | None:
        """Queue one step; return the record of the previous one (read now, while this one runs)."""
        built, cfg = self.built, self.cfg
        if self.clock is None:
            self.clock = now()
        built.model.zero_grad_buffer()
        built.optimizer.zero_grad()
        count = cfg.micro_batches()
        reduced = self.forward_backward(
            forward_step_func=self._forward_step,
            data_iterator=self._micro_batches(step),
            model=[built.model],
            num_microbatches=count,
            seq_length=cfg.seq_len,
            micro_batch_size=cfg.batch_size // count,
            forward_only=False,
        )
        lr = built.optimizer.param_groups[0]["lr"]
        _updated, grad_norm, _zeros_in_grad = built.optimizer.step()
        built.scheduler.step(increment=1)
        record = self.finish()
        self.pending = (step, self._global_loss(reduced), lr, float(grad_norm or 0.0))
        return record

    def _global_loss(self, reduced: list[dict[str, torch.Tensor]]) -> torch.Tensor:
        """The step's mean loss over all data: last-stage ranks hold it (each TP rank the same value)."""
        device = self.info.device
        if reduced:
            value = torch.stack([item["loss"] for item in reduced]).mean().reshape(1)
        else:
            value = torch.zeros(1, device=device)
        if self.info.world_size > 1:
            dist.all_reduce(value, op=dist.ReduceOp.SUM)
            value /= self.cfg.tp * self.dp_world
        return value

    def finish(self, timed: bool = True) -> dict[str, Any] | None:
        """The queued step's record; ``timed=False`` for a flush (only the tail of the step was timed)."""
        if self.pending is None:
            return None
        step, loss, lr, grad_norm = self.pending
        self.pending = None
        loss_value = float(loss.item())
        rates = (self.info.world_size, self.cfg.peak_tflops)
        return step_record(
            self, step, (loss_value, grad_norm, lr), timed, rates, lambda: peak_memory_gb(self.info.device)
        )


def train(cfg: TrainConfig) -> Summary:
    """Run to ``--steps`` (or ``--max-steps-this-run`` more) and write the summary on rank 0."""
    t_start = now()
    info = init_distributed(cfg.device)
    if info.device.type != "cuda":
        raise RuntimeError(f"megatron/gpt found no CUDA device: {CUDA_ONLY}")
    run = Trainer(cfg, info)
    last = run_steps(cfg, run, info.is_main, run.save if cfg.checkpoint_dir else None)
    from importlib.metadata import version

    facts = {
        "config": cfg.config,
        "tp": cfg.tp,
        "pp": cfg.pp,
        "dp": run.dp_world,
        "sequence_parallel": cfg.sequence_parallel == "true",
        "distributed_optimizer": cfg.distributed_optimizer == "true",
        "recompute": cfg.recompute,
        "precision": cfg.precision,
        "layer_spec": "local",
        "optional_kernels": accelerators(),
        "compile": False,
        "torch": torch.__version__,
        "megatron_core": version("megatron-core"),
    }
    return finish_run(
        TESTCASE, cfg, run, info.placement(), last=last, t_start=t_start, params=run.built.params, extra=facts
    )
