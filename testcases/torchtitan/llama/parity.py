"""First-step loss of pytorch/fsdp's and torchtitan/llama's models on the same weights and the same batch.

Why: the two test cases report the same metric lines, and their loss curves are only comparable when both
networks compute the same function. pytorch/fsdp's model is initialised with its seed, its weights go through
Hugging Face's names (``trainstack_train.hf_compat.to_hf``) into torchtitan's layout (torchtitan's own
``Llama3StateDictAdapter.from_hf``, which also undoes Hugging Face's rotary permutation), and both compute
the mean next-token loss of step 0's batch of the synthetic data, in fp32 and without autocast. The JSON
records both losses and their difference; ``--tolerance`` (absolute, default 1e-4 nats) is what the
difference must stay under (fp32 summation order differs between the implementations, nothing else should).

Run as a script, ``python testcases/torchtitan/llama/parity.py``: ``titan_llama`` lies beside it, and
``trainstack_train`` is installed (the repository's virtualenv) or staged beside it, as for ``train.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from trainstack_train.config import MODEL_CONFIGS
from trainstack_train.data import BatchSource
from trainstack_train.hf_compat import to_hf
from trainstack_train.model import Transformer as Ours


def first_losses(config: str, batch: int, seq_len: int, seed: int, device: torch.device) -> dict[str, float]:
    """Both models' loss on step 0's batch, ours' weights in both."""
    from titan_llama.build import model_args
    from torchtitan.models.llama3.model.model import Transformer as Titan
    from torchtitan.models.llama3.model.state_dict_adapter import Llama3StateDictAdapter

    shape = MODEL_CONFIGS[config]
    inputs, targets = BatchSource("synthetic", shape.vocab_size, batch, seq_len, 0, 1, seed).batch(0, device)
    with torch.device(device):
        ours = Ours(shape, rope_len=seq_len)
    ours.tie_weights()
    ours.init_weights(seed)
    with torch.no_grad():
        ours_loss = float(ours(inputs, targets))
    hf = {k: v.detach().clone() for k, v in to_hf(ours.state_dict(), shape).items()}
    del ours
    args = model_args(shape, seq_len)
    titan_sd = Llama3StateDictAdapter(args, None).from_hf(hf)
    if shape.tie_embeddings:
        titan_sd.setdefault("output.weight", titan_sd["tok_embeddings.weight"])
    with torch.device("meta"):
        titan = Titan(args)
    titan.to_empty(device=device)
    with torch.no_grad():
        titan.init_weights(buffer_device=device)  # the rotary table; every weight is overwritten below
    titan.load_state_dict(titan_sd, strict=True)
    with torch.no_grad():
        logits = titan(inputs)
        titan_loss = float(torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten()))
    return {"pytorch_fsdp": ours_loss, "torchtitan_llama": titan_loss}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="llama3_2_1b", choices=sorted(MODEL_CONFIGS))
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    losses = first_losses(args.config, args.batch_size, args.seq_len, args.seed, device)
    diff = abs(losses["pytorch_fsdp"] - losses["torchtitan_llama"])
    result = {
        "benchmark": "testcase_first_loss_parity",
        "config": args.config,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "seed": args.seed,
        "dtype": "float32",
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "first_loss": losses,
        "abs_diff": diff,
        "tolerance": args.tolerance,
        "within_tolerance": diff <= args.tolerance,
    }
    text = json.dumps(result, indent=2, sort_keys=True) + "\n"
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
    sys.stdout.write(text)
    return 0 if result["within_tolerance"] else 1


if __name__ == "__main__":
    sys.exit(main())
