"""Entry point of the ``hf/finetune`` test case, started by torchrun (or plain python: one process)."""

from __future__ import annotations

from hf_finetune.config import parse_args
from trainstack_train.entry import leave, main

if __name__ == "__main__":
    leave(main("hf/finetune", parse_args, "hf_finetune.loop:train"))
