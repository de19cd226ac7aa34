"""Options of the DDP case as a dataclass, parsed from the launcher's ``--key value`` arguments."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class DDPConfig:
    """One run; the defaults finish in seconds on two CPU processes."""

    steps: int = 50
    batch_size: int = 256
    context: int = 4
    dim: int = 64
    hidden: int = 256
    vocab_size: int = 256
    lr: float = 3e-3
    seed: int = 1234
    device: str = "auto"
    checkpoint_dir: str = ""
    checkpoint_every: int = 0
    summary_json: str = ""
    metric_warmup_steps: int = 3

    def validate(self) -> None:
        """Name the bad option before any process group exists."""
        positive = ("steps", "batch_size", "context", "dim", "hidden", "vocab_size")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0:
            raise ValueError(f"--lr must be > 0, got {self.lr}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"--device must be auto, cpu or cuda, got {self.device!r}")
        if self.checkpoint_every < 0 or (self.checkpoint_every and not self.checkpoint_dir):
            raise ValueError("--checkpoint-every must be >= 0 and needs --checkpoint-dir")


def parse_args(argv: Sequence[str] | None = None) -> DDPConfig:
    """Parse and validate; errors exit with status 2 naming the option."""
    parser = argparse.ArgumentParser(description="trainstack pytorch/ddp: n-gram LM with DDP")
    for f in dataclasses.fields(DDPConfig):
        default = getattr(DDPConfig(), f.name)
        parser.add_argument("--" + f.name.replace("_", "-"), type=type(default), default=default)
    cfg = DDPConfig(**vars(parser.parse_args(argv)))
    try:
        cfg.validate()
    except ValueError as err:
        parser.error(str(err))
    return cfg
