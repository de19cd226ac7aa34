"""Write a Llama model with random weights, at one of pytorch/fsdp's named shapes, in transformers' format.

For trying ``--model-path`` where no published weights can be downloaded:
``python make_model.py --init-config tiny --output /shared/models/tiny`` writes ``config.json`` and
``model.safetensors`` (no tokenizer: the case then falls back to bytes).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hf_finetune.config import INIT_CONFIGS


def main(argv: list[str] | None = None) -> int:
    """Build the model on the CPU and ``save_pretrained`` it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--init-config", required=True, choices=INIT_CONFIGS)
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    args = parser.parse_args(argv)
    import torch
    from hf_finetune.model import random_llama

    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = random_llama(args.init_config, args.seed, torch.device("cpu"), dtype)
    model.save_pretrained(str(args.output))
    print(f"{args.init_config}: {sum(p.numel() for p in model.parameters()):,} parameters in {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
