"""Entry point of the ``pytorch/fsdp`` test case, started by torchrun (or plain python for one process)."""

from __future__ import annotations

import sys

import torch.distributed as dist
from fsdp_llama.config import parse_args
from fsdp_llama.loop import train


def main(argv: list[str] | None = None) -> int:
    """Parse, train, tear the process group down even on failure (so torchrun reports the real error)."""
    cfg = parse_args(argv)
    try:
        train(cfg)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
