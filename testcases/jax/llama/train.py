"""Entry point of the ``jax/llama`` test case, started by torchrun (or plain python: one process).

torchrun only starts the processes and exports their ranks: JAX joins them itself (``jax_llama.dist``).
"""

from __future__ import annotations

import sys

from jax_llama.config import parse_args
from trainstack_train.entry import main


def shutdown() -> None:
    """Leave JAX's distributed service when several processes joined it (a run without jax never did)."""
    jax = sys.modules.get("jax")
    if jax is not None and jax.process_count() > 1:
        jax.distributed.shutdown()


if __name__ == "__main__":
    sys.exit(main("jax/llama", parse_args, "jax_llama.loop:train", teardown=shutdown))
