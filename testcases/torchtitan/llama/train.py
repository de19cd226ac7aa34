"""Entry point of the ``torchtitan/llama`` test case, started by torchrun (or plain python: one process)."""

from __future__ import annotations

from titan_llama.config import parse_args
from trainstack_train.entry import leave, main

if __name__ == "__main__":
    leave(main("torchtitan/llama", parse_args, "titan_llama.loop:train"))
