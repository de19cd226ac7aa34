"""The training loop around torchtitan's objects: resume, step, the metric line, checkpoints, the summary.

One step is torchtitan's: forward and loss (in the loss-parallel context under TP, through the pipeline
schedule under PP), backward, torchtitan's gradient clipping (norm reduced across pipeline stages), its
optimizer and LR-scheduler containers. What is read and printed is ``pytorch/fsdp``'s, so the launcher
parses both cases alike: the loss and gradient norm of a step are read one step later (the host never waits
for the GPU in between), and the last line and the one before a checkpoint carry the loss with null rates.
Resume: torchtitan's ``CheckpointManager`` loads the highest ``step-N`` under ``--checkpoint-dir``; the step
travels in its state (``train_state``), and so does the reader's position in a prepared corpus
(``data_position``, the shared :class:`~trainstack_train.data.ReaderPosition`), so the next batch, and the
curve, are the uninterrupted run's. A checkpoint saved before the position was kept resumes too: the reader
starts after the samples the saved steps read (:mod:`.resume`).
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.tensor import DTensor
from torchtitan.components.checkpoint import CheckpointManager
from torchtitan.distributed import utils as dist_utils
from trainstack_train.data import BatchSource, ReaderPosition
from trainstack_train.metrics import (
    StepTimer,
    Summary,
    finish_run,
    flops_per_token,
    now,
    peak_memory_gb,
    report,
    run_steps,
    step_record,
)
from trainstack_train.parallel import DistInfo, init_distributed

from . import resume
from .build import Built, build, global_tokens, use_compile
from .config import TrainConfig

TESTCASE = "torchtitan/llama"


class TrainState(Stateful):
    """The step, saved with the model by torchtitan's checkpointer (as its trainer saves its own)."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, Any]:
        return {"step": torch.tensor(self.step, dtype=torch.int64)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.step = int(state_dict["step"])


class Trainer:
    """One invocation: torchtitan's model and containers, our data, timer and records."""

    def __init__(self, cfg: TrainConfig, info: DistInfo) -> None:
        self.cfg = cfg
        self.info = info
        self.built: Built = build(cfg, info.device, info.world_size)
        self.state = TrainState()
        self.position = ReaderPosition()
        self.checkpoint = self._load_latest({"train_state": self.state, resume.POSITION: self.position})
        self.start_step = self.state.step
        dims = self.built.dims
        # Ranks of one data-parallel group read the same rows: TP and PP split a batch, FSDP the global one.
        dp_rank, dp_world = _dp_coordinates(dims, info)
        self.data = BatchSource(
            cfg.data, cfg.model.vocab_size, cfg.batch_size, cfg.seq_len, dp_rank, dp_world, cfg.seed
        )
        self.position.attach(self.data, self.start_step)
        self.tokens_per_step = cfg.batch_size * cfg.seq_len * dp_world
        self.global_tokens = global_tokens(cfg, info.world_size)
        self.flops_token = flops_per_token(cfg.model, self.built.params, cfg.seq_len)
        self.timer = StepTimer(cfg.metric_warmup_steps, self.tokens_per_step)
        loss_parallel = dims.tp_enabled and not self.built.job.parallelism.disable_loss_parallel
        self.train_context = dist_utils.get_train_context(loss_parallel)
        # Without FSDP torchtitan computes in bf16 under autocast (mixed_precision_param); FSDP casts itself.
        self.amp = (
            dist_utils.maybe_enable_amp(dims, self.built.job.training.mixed_precision_param, "cuda")
            if info.device.type == "cuda"
            else contextlib.nullcontext()
        )
        self.losses: list[float] = []
        self.pending: tuple[int, torch.Tensor, float] | None = None
        self.clock: float | None = None

    def _load_latest(self, states: dict[str, Stateful]) -> CheckpointManager:
        """torchtitan's checkpointer, once it has loaded the latest checkpoint under ``--checkpoint-dir``.

        A checkpoint saved before the reader's position was kept holds no ``data_position``: that state is
        left out of the load (DCP would refuse the missing key) and the reader is placed from the step.
        """
        found = resume.latest(self.cfg.checkpoint_dir) if self.cfg.checkpoint_dir else None
        skip = resume.absent(found[1]) if found else []
        manager = self.built.checkpointer(states, skip)
        if found:
            manager.load(step=found[0])
            if resume.POSITION in skip and self.info.is_main:
                print(resume.derived_position_note(found[1], self.state.step), file=sys.stderr, flush=True)
        return manager

    def _forward_backward(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """This rank's share of the global mean loss, back-propagated; under PP only last stages hold one."""
        built = self.built
        if built.pp_schedule is not None:
            losses: list[torch.Tensor] | None = [] if built.last_stage else None
            targets = labels if built.last_stage else None
            with self.train_context():
                if built.first_stage:
                    built.pp_schedule.step(inputs, target=targets, losses=losses)
                else:
                    built.pp_schedule.step(target=targets, losses=losses)
            if losses:
                return torch.sum(torch.stack(losses)).detach()
            return torch.tensor(0.0, device=self.info.device)
        with self.train_context():
            with self.amp:
                pred = built.parts[0](inputs)
                loss = built.loss_fn(pred, labels) / self.global_tokens
            del pred
            loss.backward()
        return loss.detach()

    def step(self, step: int) -> dict[str, Any] | None:
        """Queue one step; return the record of the previous one (read now, while this one runs)."""
        built = self.built
        if self.clock is None:
            self.clock = now()
        inputs, labels = self.data.batch(step, self.info.device)
        built.optimizers.zero_grad()
        loss = self._forward_backward(inputs, labels)
        params = [p for part in built.parts for p in part.parameters()]
        pp_mesh = built.dims.get_mesh("pp") if built.dims.pp_enabled else None
        norm = dist_utils.clip_grad_norm_(params, self.cfg.grad_clip, foreach=True, pp_mesh=pp_mesh)
        lr = built.optimizers.optimizers[0].param_groups[0]["lr"]
        built.optimizers.step()
        built.schedulers.step()
        record = self.finish()
        self.pending = (step, self._stats(loss, norm), lr)
        return record

    def _stats(self, loss: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
        """``[global mean loss, grad norm]``, queued on the device now and read a step later."""
        if isinstance(loss, DTensor):
            loss = loss.full_tensor()  # under TP's loss parallelism: replicated over the TP ranks
        value = loss.float().clone()
        if self.info.world_size > 1:
            # Shares summed over the world: each data-parallel group's share is held by its tp ranks (those of
            # the last stage under PP; the other stages add zero).
            dist.all_reduce(value, op=dist.ReduceOp.SUM)
            value /= self.built.dims.tp
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        return torch.stack((value, norm.detach().float().to(value.device)))

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

    def save(self, step: int, last: bool) -> None:
        """torchtitan's save of model, optimizer, schedule and step; excluded from the next step's time."""
        self.state.step = step
        self.checkpoint.save(curr_step=step, last_step=last)
        self.clock = None


def _dp_coordinates(dims: Any, info: DistInfo) -> tuple[int, int]:
    """This rank's index among the data-parallel groups and their number (ranks of a TP/PP group agree)."""
    if not dims.dp_enabled:
        return 0, 1
    mesh = dims.get_mesh("fsdp")
    return mesh.get_local_rank(), mesh.size()


def train(cfg: TrainConfig) -> Summary:
    """Run to ``--steps`` (or ``--max-steps-this-run`` more) and write the summary on rank 0."""
    t_start = now()
    info = init_distributed(cfg.device)
    run = Trainer(cfg, info)

    def save(done: int) -> None:
        run.save(done, last=done == cfg.steps)

    last = run_steps(cfg, run, info.is_main, save if cfg.checkpoint_dir else None)
    report(run.finish(timed=False), info.is_main)
    run.checkpoint.close()
    dims = run.built.dims
    import torchtitan

    facts = {
        "config": cfg.config,
        "fsdp": dims.dp_shard,
        "tp": dims.tp,
        "pp": dims.pp,
        "ac": cfg.ac,
        "compile": use_compile(cfg, info.device),
        "precision": cfg.precision,
        "fp8_recipe": cfg.fp8_recipe if cfg.precision == "fp8" else None,
        "param_dtype": run.built.job.training.mixed_precision_param,
        "torch": torch.__version__,
        "torchtitan": torchtitan.__version__,
    }
    return finish_run(
        TESTCASE, cfg, run, info.placement(), last=last, t_start=t_start, params=run.built.params, extra=facts
    )
