"""Options of the DDP case as a dataclass, parsed from the launcher's ``--key value`` arguments."""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass

from trainstack_train.config import PEAK_ENV, peak_from, positive_finite


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
    peak_tflops: float | None = None

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
        if self.peak_tflops is not None and not positive_finite(self.peak_tflops):
            raise ValueError(f"--peak-tflops must be a finite number > 0, got {self.peak_tflops!r}")


def parse_args(argv: Sequence[str] | None = None) -> DDPConfig:
    """Parse and validate; errors exit with status 2 naming the option."""
    parser = argparse.ArgumentParser(description="trainstack pytorch/ddp: n-gram LM with DDP")
    for f in dataclasses.fields(DDPConfig):
        default = getattr(DDPConfig(), f.name)
        if f.name == "peak_tflops":
            # Read as text and checked by peak_from, so the message names the option or the variable.
            parser.add_argument(
                "--peak-tflops", default=None, metavar="TFLOPS", help=f"dense BF16 peak ({PEAK_ENV})"
            )
        else:
            parser.add_argument("--" + f.name.replace("_", "-"), type=type(default), default=default)
    namespace = parser.parse_args(argv)
    try:
        namespace.peak_tflops = peak_from(namespace.peak_tflops, os.environ)
        cfg = DDPConfig(**vars(namespace))
        cfg.validate()
    except ValueError as err:
        parser.error(str(err))
    return cfg
