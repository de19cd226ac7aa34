"""Entry point of the ``megatron/gpt`` test case, started by torchrun (or plain python: one process)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Staged, pytorch/fsdp's package lies beside this file (the manifest's `include`); in the repository it is
# the sibling test case's.
if not (HERE / "fsdp_llama").is_dir():
    sys.path.insert(1, str(HERE.parents[1] / "pytorch" / "fsdp"))

from megatron_gpt.config import parse_args  # noqa: E402 - needs the path above


def main(argv: list[str] | None = None) -> int:
    """Parse and check every rule; ``--validate-only true`` stops there (the launcher's check).

    ``--preflight true`` runs what comes before megatron-core's first CUDA-only call and exits 0 only when
    every check passed on every rank; anything else trains (and refuses a node without CUDA).
    """
    cfg = parse_args(argv)
    if cfg.validate_only == "true":
        print(f"megatron/gpt: the arguments hold for {os.environ.get('WORLD_SIZE', '1')} process(es)")
        return 0
    import torch.distributed as dist

    try:
        if cfg.preflight == "true":
            from megatron_gpt.preflight import preflight

            return 0 if preflight(cfg).extra["passed"] else 1
        from megatron_gpt.loop import train

        train(cfg)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


def leave(code: int) -> None:
    """Exit once output is flushed, skipping the interpreter's teardown (as pytorch/fsdp's entrypoint does).

    torch's C++ teardown can abort a finished rank at exit on a loaded host; only a run that returned
    normally leaves this way, an exception keeps its traceback.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    leave(main())
