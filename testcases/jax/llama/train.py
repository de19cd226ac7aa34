"""Entry point of the ``jax/llama`` test case, started by torchrun (or plain python: one process).

torchrun only starts the processes and exports their ranks: JAX joins them itself (``jax_llama.dist``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Staged, pytorch/fsdp's package lies beside this file (the manifest's `include`); in the repository it is
# the sibling test case's.
if not (HERE / "fsdp_llama").is_dir():
    sys.path.insert(1, str(HERE.parents[1] / "pytorch" / "fsdp"))

from jax_llama.config import parse_args  # noqa: E402 - needs the path above


def main(argv: list[str] | None = None) -> int:
    """Parse and check every rule; ``--validate-only true`` stops there (the launcher's check)."""
    cfg = parse_args(argv)
    if cfg.validate_only == "true":
        print(f"jax/llama: the arguments hold for {os.environ.get('WORLD_SIZE', '1')} process(es)")
        return 0
    import jax
    from jax_llama.loop import train

    train(cfg)
    if jax.process_count() > 1:
        jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
