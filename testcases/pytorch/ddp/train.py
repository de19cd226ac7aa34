"""Entry point of the ``pytorch/ddp`` test case, started by torchrun (or plain python for one process)."""

from __future__ import annotations

import os
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


def leave(code: int) -> None:
    """Exit once output is flushed, without the interpreter's teardown.

    Why: on a loaded host torch's C++ teardown can abort a finished rank at interpreter exit ("terminate
    called without an active exception": a distributed worker thread still joinable), which torchrun then
    reports as a failed run although every step ran and the summary is written. Only a run that returned
    normally leaves this way; an exception takes the normal path and its traceback.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    leave(main())
