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
import resource
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    """One machine-readable line; the launcher greps for the prefix."""
    sys.stdout.write(METRIC_PREFIX + json.dumps(record, sort_keys=True) + "\n")
    sys.stdout.flush()


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
    """The JSON object every trainstack entrypoint writes at the end (``--summary-json``)."""

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
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(target.suffix + ".tmp")
        tmp.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(target)


def now() -> float:
    """Monotonic clock for step timing."""
    return time.perf_counter()
