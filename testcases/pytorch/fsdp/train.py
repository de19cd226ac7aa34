"""Entry point of the ``pytorch/fsdp`` test case, started by torchrun (or plain python: one process)."""

from __future__ import annotations

from trainstack_train.config import parse_args
from trainstack_train.entry import leave, main

if __name__ == "__main__":
    leave(main("pytorch/fsdp", parse_args, "trainstack_train.loop:train"))
