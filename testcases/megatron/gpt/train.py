"""Entry point of the ``megatron/gpt`` test case, started by torchrun (or plain python: one process).

``--preflight true`` runs what comes before megatron-core's first CUDA-only call and exits 0 only when every
check passed on every rank; anything else trains (and refuses a node without CUDA).
"""

from __future__ import annotations

from typing import Any

from megatron_gpt.config import parse_args
from trainstack_train.entry import leave, main


def start(cfg: Any) -> int:
    """The preflight's verdict, or a training run."""
    if cfg.preflight == "true":
        from megatron_gpt.preflight import preflight

        return 0 if preflight(cfg).extra["passed"] else 1
    from megatron_gpt.loop import train

    train(cfg)
    return 0


if __name__ == "__main__":
    leave(main("megatron/gpt", parse_args, start))
