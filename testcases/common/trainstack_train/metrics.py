"""FLOP accounting, MFU, the per-step metric line and the JSON summary.

FLOPs per token (the convention of the Hugging Face reference figures, so the figures compare):
``6 * N + 12 * n_layers * dim * seq_len``, with ``N`` the unique parameter count (a tied embedding counted
once). ``6N`` is forward (2N) plus backward (4N) of every weight; the second term is attention's two
``seq x seq`` products (scores and weighted values), forward and backward, counted without the causal half
(PaLM's convention), so the same FLOP count is used for every implementation measured side by side.
MFU = achieved FLOP/s per GPU / the GPU's dense bf16 peak, given by ``--peak-tflops`` or the launcher's
``TRAINSTACK_GPU_PEAK_TFLOPS`` (the collection's instance catalog); without one MFU is null, and the summary's
``mfu_note`` says so.

No torch at import: test cases of other frameworks (``jax/llama``) take the FLOP count, the metric line and
the summary from here too; only :func:`peak_memory_gb` asks torch, for a torch device, when it is called.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .config import ModelConfig

if TYPE_CHECKING:
    import torch

METRIC_PREFIX = "TRAINSTACK_METRIC "

# Why MFU is null when no peak was given (the summary's ``mfu_note``).
PEAK_UNKNOWN = "peak unknown: launch with an instance type (training_job_instance_type) or pass --peak-tflops"


def mfu_note(peak: float | None) -> str | None:
    """Say why ``mfu`` is null; None when it was computed. The peak comes from the launcher, never a guess."""
    return None if peak else PEAK_UNKNOWN


def flops_per_token(cfg: ModelConfig, num_params: int, seq_len: int) -> float:
    """Training FLOPs per token, formula in the module docstring."""
    return 6.0 * num_params + 12.0 * cfg.n_layers * cfg.dim * seq_len


def peak_memory_gb(device: torch.device) -> float:
    """Peak allocated GPU memory, or the process's peak RSS on CPU, in GB (1e9 bytes)."""
    if device.type == "cuda":
        import torch

        return torch.cuda.max_memory_allocated(device) / 1e9
    return peak_rss_gb()


def peak_rss_gb() -> float:
    """The process's peak resident set size in GB (1e9 bytes): a CPU run's memory, whatever the framework."""
    kilobytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kilobytes * 1024 / 1e9


@dataclass
class StepTimer:
    """Throughput over the steps after the first ``warmup`` (compile and allocator warm-up excluded)."""

    warmup: int
    tokens_per_step: int
    times: list[float] = field(default_factory=list)

    def record(self, seconds: float) -> None:
        """One step's wall time, measured after the loss was synchronised."""
        self.times.append(seconds)

    def steady(self) -> list[float]:
        """The timed window; all steps when the run is shorter than the warm-up."""
        return self.times[self.warmup :] if len(self.times) > self.warmup else list(self.times)

    def tokens_per_s(self) -> float | None:
        """Global tokens per second over the steady window."""
        window = self.steady()
        total = sum(window)
        return self.tokens_per_step * len(window) / total if total > 0 else None


def emit(record: dict[str, Any]) -> None:
    """One machine-readable line, written to the stdout descriptor in a single ``write``.

    Why one system call: ranks that share a pipe (torchrun's, a job's log) would otherwise interleave their
    text and newline writes (``print`` makes two, and Python unbuffered makes each a system call), and two
    records would land on one line. A pipe keeps a write of at most ``PIPE_BUF`` (4096) bytes whole.
    """
    line = METRIC_PREFIX + json.dumps(record, sort_keys=True) + "\n"
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a stream without a descriptor (a capture, a StringIO)
        sys.stdout.write(line)
        sys.stdout.flush()
        return
    sys.stdout.flush()  # what was printed before stays before the record
    data = line.encode()
    written = 0
    while written < len(data):
        written += os.write(descriptor, data[written:])


def report(record: dict[str, Any] | None, is_main: bool) -> None:
    """Print a step's record on rank 0 only; None (no step was pending) prints nothing."""
    if record is not None and is_main:
        emit(record)


def throughput_fields(
    tokens_per_s: float | None, world_size: int, flops_token: float, peak: float | None
) -> dict[str, float | None]:
    """tokens/s, TFLOP/s per GPU and MFU from a global token rate."""
    if tokens_per_s is None:
        return {"tokens_per_s": None, "tokens_per_s_per_gpu": None, "tflops_per_gpu": None, "mfu": None}
    per_gpu = tokens_per_s / world_size
    tflops = per_gpu * flops_token / 1e12
    return {
        "tokens_per_s": tokens_per_s,
        "tokens_per_s_per_gpu": per_gpu,
        "tflops_per_gpu": tflops,
        "mfu": tflops / peak if peak else None,
    }


@dataclass
class Summary:
    """The JSON object every trainstack entrypoint writes at the end (``--summary-json``), with the torch the
    run imported (:func:`torch_record`)."""

    testcase: str
    world_size: int
    nodes: int
    device: str
    gpu_model: str | None
    steps: int
    first_loss: float | None
    final_loss: float | None
    tokens_per_s: float | None
    tflops_per_gpu: float | None
    mfu: float | None
    peak_mem_gb: float | None
    elapsed_s: float
    extra: dict[str, Any] = field(default_factory=dict)

    def write(self, path: str) -> None:
        """Write atomically (temp file then rename) so a collector never reads half a file."""
        if not path:
            return
        body = asdict(self)
        body.update(body.pop("extra"))
        body.update(torch_record())
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(target.suffix + ".tmp")
        tmp.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(target)


def torch_record() -> dict[str, Any]:
    """The torch version this process imported (None when it imported none: jax/llama), and the exception
    the launch accepted for it.

    Why in the summary: the launch refuses a torch other than the lock's unless ``training_job_accept_torch``
    names it; a result measured on such a torch must say so where it is read, not only in the launch's log.
    The launcher passes the exception as ``TRAINSTACK_TORCH_ACCEPTED`` (the version found) and
    ``TRAINSTACK_TORCH_LOCK`` (the lock's); without them ``torch_accepted`` is null.
    """
    imported = sys.modules.get("torch")
    accepted = os.environ.get("TRAINSTACK_TORCH_ACCEPTED", "")
    return {
        "torch_version": str(getattr(imported, "__version__", "")) or None if imported else None,
        "torch_accepted": (
            {"found": accepted, "lock": os.environ.get("TRAINSTACK_TORCH_LOCK", "")} if accepted else None
        ),
    }


class Clocked(Protocol):
    """A trainer that reads each step one step late and times it from the read before."""

    clock: float | None
    losses: list[float]
    timer: StepTimer
    flops_token: float
    tokens_per_step: int


def step_record(
    run: Clocked,
    step: int,
    read: tuple[float, float, float],
    timed: bool,
    rates: tuple[int, float | None],
    memory: Callable[[], float],
) -> dict[str, Any]:
    """The metric line of a step just read: ``read`` is its loss, gradient norm and learning rate, ``rates``
    the world size and peak its throughput is divided by, ``memory`` reads the peak memory now.

    Every case reads a step's loss one step late (the host never waits for the device in between), so its
    time is the interval since the previous read. ``timed=False`` is a flush (before a checkpoint, at the
    end): only the tail of its step was timed, so it keeps out of the throughput window and its rates are
    null rather than wrong.
    """
    loss, grad_norm, lr = read
    finished = now()
    elapsed = finished - (run.clock or finished)
    run.clock = finished
    if timed:
        run.timer.record(elapsed)
    run.losses.append(loss)
    rate = run.tokens_per_step / elapsed if timed and elapsed > 0 else None
    world_size, peak = rates
    return {
        "step": step + 1,
        "loss": loss,
        "lr": lr,
        "grad_norm": grad_norm,
        "step_time_s": elapsed if timed else None,
        "peak_mem_gb": memory(),
        **throughput_fields(rate, world_size, run.flops_token, peak),
    }


class RunArgs(Protocol):
    """The options the loop and the summary read, as every Llama case's ``TrainConfig`` holds them."""

    steps: int
    batch_size: int
    seq_len: int
    checkpoint_every: int
    max_steps_this_run: int
    peak_tflops: float | None
    summary_json: str


class RunProgress(Protocol):
    """What every case's trainer keeps while it runs, read once more for the summary."""

    losses: list[float]
    start_step: int
    timer: StepTimer
    flops_token: float
    tokens_per_step: int

    def step(self, step: int) -> dict[str, Any] | None:
        """Queue one step; the record of the one before (read one step late), None for the first."""

    def finish(self, timed: bool = True) -> dict[str, Any] | None:
        """The record of the step still pending, None when none is."""


def last_step(cfg: RunArgs, start: int) -> int:
    """Where this invocation stops: ``--steps``, or ``--max-steps-this-run`` past where it resumed."""
    return min(cfg.steps, start + cfg.max_steps_this_run) if cfg.max_steps_this_run else cfg.steps


def run_steps(
    cfg: RunArgs, run: RunProgress, is_main: bool, save: Callable[[int], None] | None = None
) -> int:
    """Step from where the run resumed to ``--steps`` (or ``--max-steps-this-run`` more); the last step.

    With ``save``, a checkpoint follows every ``--checkpoint-every`` steps and the last one, each after a
    flush (the pending step's line, with null rates: only its tail was timed) so a resumed run's curve
    continues from the saved step.
    """
    last = last_step(cfg, run.start_step)
    for step in range(run.start_step, last):
        report(run.step(step), is_main)
        done = step + 1
        if save is not None and (done == last or (cfg.checkpoint_every and done % cfg.checkpoint_every == 0)):
            report(run.finish(timed=False), is_main)
            save(done)
    return last


@dataclass(frozen=True)
class Placement:
    """Where a run ran: its processes, the device each drove and how its peak memory is read."""

    world_size: int
    nodes: int
    device: str
    gpu_model: str | None
    is_main: bool
    peak_mem_gb: Callable[[], float | None]


def finish_run(
    testcase: str,
    cfg: RunArgs,
    run: RunProgress,
    where: Placement,
    *,
    last: int,
    t_start: float,
    params: int,
    extra: dict[str, Any],
) -> Summary:
    """The end of every case's run: the last step's line, the summary, written on rank 0 (atomically).

    Why here: ``training_job`` parses every case's summary the same way, so the fields every case reports
    (throughput over the steady window, the run's extent, the FLOP count and the peak it was divided by) are
    assembled in one place, the host's name among them; ``extra`` holds the case's own (its parallel degrees,
    its library versions).
    The pending step is read first (a flush: its record carries the loss with null rates); a loop that
    flushed already gets nothing printed twice.
    """
    report(run.finish(timed=False), where.is_main)
    rates = throughput_fields(run.timer.tokens_per_s(), where.world_size, run.flops_token, cfg.peak_tflops)
    summary = Summary(
        testcase=testcase,
        world_size=where.world_size,
        nodes=where.nodes,
        device=where.device,
        gpu_model=where.gpu_model,
        steps=last,
        first_loss=run.losses[0] if run.losses else None,
        final_loss=run.losses[-1] if run.losses else None,
        tokens_per_s=rates["tokens_per_s"],
        tflops_per_gpu=rates["tflops_per_gpu"],
        mfu=rates["mfu"],
        peak_mem_gb=where.peak_mem_gb(),
        elapsed_s=now() - t_start,
        extra={
            "tokens_per_s_per_gpu": rates["tokens_per_s_per_gpu"],
            "resumed_from_step": run.start_step,
            "steps_this_run": len(run.losses),
            "losses": run.losses,
            "params": params,
            "flops_per_token": run.flops_token,
            "peak_tflops": cfg.peak_tflops,
            "mfu_note": mfu_note(cfg.peak_tflops),
            "batch_size": cfg.batch_size,
            "seq_len": cfg.seq_len,
            "global_batch_tokens": run.tokens_per_step,
            "hostname": os.uname().nodename,
            **extra,
        },
    )
    if where.is_main:
        summary.write(cfg.summary_json)
    return summary


def now() -> float:
    """Monotonic clock for step timing."""
    return time.perf_counter()
