"""Entry point of the ``pytorch/ddp`` test case, started by torchrun (or plain python for one process)."""

from __future__ import annotations

import sys

import torch.distributed as dist
from ddp_ngram.config import parse_args
from ddp_ngram.loop import train


def main(argv: list[str] | None = None) -> int:
    """Parse, train, always tear the process group down."""
    cfg = parse_args(argv)
    try:
        train(cfg)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
