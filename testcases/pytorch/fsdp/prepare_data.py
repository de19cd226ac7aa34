"""Turn text files into the ``trainstack-tokens-v1`` format with the byte-level tokenizer (no download).

Usage: ``python prepare_data.py --output DIR FILE [FILE ...]``; each file is one document.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trainstack_train.data import prepare


def main(argv: list[str] | None = None) -> int:
    """Tokenize and print the resulting ``meta.json``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", required=True, type=Path, help="directory to write tokens.bin/meta.json")
    parser.add_argument("inputs", nargs="+", type=Path, help="UTF-8 text files, one document each")
    args = parser.parse_args(argv)
    try:
        meta = prepare(args.inputs, args.output)
    except FileNotFoundError as err:
        parser.error(str(err))
    print(json.dumps(meta, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
