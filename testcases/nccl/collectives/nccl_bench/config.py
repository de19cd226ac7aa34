"""Options of the collectives benchmark, as a dataclass parsed from ``--key value`` arguments."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
DTYPES = ("float32", "bfloat16", "float16")
_SIZE = re.compile(r"^(\d+)([KMG]?)B?$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """nccl-tests' size spelling: ``8``, ``64K``, ``8G`` (binary units)."""
    match = _SIZE.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"bad size {text!r}: use a number with an optional K, M or G suffix")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


@dataclass
class BenchConfig:
    """One sweep: each op over sizes ``min_bytes * factor**i`` up to ``max_bytes``."""

    ops: str = ",".join(OPS[:4])
    min_bytes: int = 8
    max_bytes: int = 1 << 20
    step_factor: int = 2
    iters: int = 20
    warmup_iters: int = 5
    large_iters: int = 5
    large_bytes: int = 1 << 30
    dtype: str = "float32"
    device: str = "auto"
    check: str = "true"
    summary_json: str = ""

    @property
    def op_list(self) -> list[str]:
        """Requested collectives in order."""
        return [op.strip() for op in self.ops.split(",") if op.strip()]

    def validate(self) -> None:
        """Name the bad option before any process group exists."""
        unknown = [op for op in self.op_list if op not in OPS]
        if unknown or not self.op_list:
            raise ValueError(f"--ops: unknown or empty {unknown}; choose from {', '.join(OPS)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype must be one of {DTYPES}, got {self.dtype!r}")
        if not 0 < self.min_bytes <= self.max_bytes:
            raise ValueError(
                f"--min-bytes ({self.min_bytes}) must be > 0 and <= --max-bytes ({self.max_bytes})"
            )
        if self.step_factor < 2:
            raise ValueError(f"--step-factor must be >= 2, got {self.step_factor}")
        if self.iters < 1 or self.warmup_iters < 0 or self.large_iters < 1:
            raise ValueError("--iters and --large-iters must be >= 1, --warmup-iters >= 0")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"--device must be auto, cpu or cuda, got {self.device!r}")
        if self.check not in ("true", "false"):
            raise ValueError(f"--check must be true or false, got {self.check!r}")


def parse_args(argv: Sequence[str] | None = None) -> BenchConfig:
    """Parse and validate; errors exit with status 2 and the option's name."""
    parser = argparse.ArgumentParser(description="trainstack nccl/collectives: bus bandwidth sweep")
    defaults = BenchConfig()
    for name, value in vars(defaults).items():
        kind = parse_size if name.endswith("_bytes") else type(value)
        parser.add_argument("--" + name.replace("_", "-"), type=kind, default=value)
    cfg = BenchConfig(**vars(parser.parse_args(argv)))
    try:
        cfg.validate()
    except ValueError as err:
        parser.error(str(err))
    return cfg
