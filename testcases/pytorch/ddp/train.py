"""Entry point of the ``pytorch/ddp`` test case, started by torchrun (or plain python: one process)."""

from __future__ import annotations

from ddp_ngram.config import parse_args
from trainstack_train.entry import leave, main

if __name__ == "__main__":
    leave(main("pytorch/ddp", parse_args, "ddp_ngram.loop:train"))
