"""Entry point of the ``data/prepare`` test case, started by torchrun (or plain python: one process).

Every rule is checked before anything is written, by each rank and, with ``--validate-only true``, by the
launcher on the submit host before it queues the job; a broken one exits with status 2 and names the input.
"""

from __future__ import annotations

import os
import sys

from data_prepare.config import build_parser, parse_args, problems
from trainstack_train.entry import destroy_process_group, leave


def main() -> int:
    """Parse, check, and either stop there (``--validate-only true``) or prepare."""
    cfg = parse_args()
    found = problems(cfg, os.environ)
    if found:
        build_parser().error("; ".join(found))
    if cfg.validate_only == "true":
        print(f"data/prepare: the arguments hold for {os.environ.get('WORLD_SIZE', '1')} process(es)")
        return 0
    from data_prepare.job import run

    try:
        return run(cfg)
    finally:
        destroy_process_group()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    leave(code)
