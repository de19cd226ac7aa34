"""What every test case's ``train.py`` does around its training loop: parse, check, train, tear down, exit.

A ``train.py`` names its case, its parser and where its loop lives; :func:`main` does the rest the same way
for every case, so the launcher's ``--validate-only true`` check, the process group's teardown and the exit
status mean the same thing whichever case ran. Nothing here imports a framework before the arguments hold:
the validation-only run stays free of torch and jax.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

# What a case starts once its arguments hold: "package.module:function" (imported only then, so checking the
# arguments imports no framework), or the function itself. It returns an exit status, or None for 0.
Start = str | Callable[[Any], object]


def _resolve(start: Start) -> Callable[[Any], object]:
    if callable(start):
        return start
    module, _sep, name = start.partition(":")
    return getattr(importlib.import_module(module), name or "train")


def destroy_process_group() -> None:
    """Tear torch's process group down when the run made one (so torchrun reports the real error)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def main(
    testcase: str,
    parse_args: Callable[[Sequence[str] | None], Any],
    start: Start,
    argv: Sequence[str] | None = None,
    teardown: Callable[[], None] = destroy_process_group,
) -> int:
    """Parse and check every rule; ``--validate-only true`` stops there (the launcher's check), else train.

    ``teardown`` runs after training, also when it failed (torch's process group by default).
    """
    cfg = parse_args(argv)
    if getattr(cfg, "validate_only", "false") == "true":
        print(f"{testcase}: the arguments hold for {os.environ.get('WORLD_SIZE', '1')} process(es)")
        return 0
    try:
        status = _resolve(start)(cfg)
    finally:
        teardown()
    return status if isinstance(status, int) else 0


def leave(code: int) -> NoReturn:
    """Exit once output is flushed, without the interpreter's teardown.

    Why: on a loaded host torch's C++ teardown can abort a finished rank at interpreter exit ("terminate
    called without an active exception": a distributed worker thread still joinable), which torchrun then
    reports as a failed run although every step ran and the summary is written. Only a run that returned
    normally leaves this way; an exception takes the normal path and its traceback.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
