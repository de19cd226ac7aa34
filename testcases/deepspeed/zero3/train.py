"""Entry point of the ``deepspeed/zero3`` test case, started by torchrun (or plain python: one process)."""

from __future__ import annotations

from ds_llama.config import parse_args
from trainstack_train.entry import leave, main

if __name__ == "__main__":
    leave(main("deepspeed/zero3", parse_args, "ds_llama.loop:train"))
