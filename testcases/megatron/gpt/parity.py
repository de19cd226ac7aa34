"""First-step loss of pytorch/fsdp's and megatron/gpt's models on the same weights and the same batch.

Why: megatron-core initialises GPTModel with its own scheme, so the two cases' training runs start from
different losses; only with the same weights does a difference say something about the implementations.
pytorch/fsdp's model is initialised with its seed, its weights go through Hugging Face's names
(``trainstack_train.hf_compat.to_hf``) into GPTModel's layout (``megatron_gpt.hf_weights.from_hf``), and both
compute the mean next-token loss of step 0's batch of the synthetic data twice:

* in fp32 with TF32 off; ``--tolerance`` (absolute, default 1e-4 nats) covers summation order only;
* as each case trains, in bf16 weights (megatron-core's ``Float16Module`` with its softmax in fp32,
  pytorch/fsdp's model cast to bf16 with its fp32 rotary table); ``--bf16-tolerance`` is relative (default
  2**-8, bf16's unit roundoff: both sides round weights and activations to bf16, in different places).

megatron-core's forward needs CUDA (see the test case's docs), so this runs on a GPU. Run as a script,
``python testcases/megatron/gpt/parity.py``: ``megatron_gpt`` lies beside it, and ``trainstack_train`` is
installed (the repository's virtualenv) or staged beside it, as for ``train.py``.
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

Batch = tuple[torch.Tensor, torch.Tensor]


def fsdp_losses(
    config: str, seq_len: int, seed: int, batch: Batch, device: torch.device
) -> tuple[dict, dict]:
    """pytorch/fsdp's model from ``seed``: its fp32 and bf16 losses, and its weights in HF's names."""
    shape = MODEL_CONFIGS[config]
    with torch.device(device):
        ours = Ours(shape, rope_len=seq_len)
    ours.tie_weights()
    ours.init_weights(seed)
    losses = {}
    with torch.no_grad():
        losses["float32"] = float(ours(*batch))
        hf = {k: v.detach().clone() for k, v in to_hf(ours.state_dict(), shape).items()}
        ours.to(torch.bfloat16)
        ours.init_rope()
        losses["bfloat16"] = float(ours(*batch))
    return losses, hf


def megatron_loss(config: str, seq_len: int, hf: dict, batch: Batch, dtype: torch.dtype) -> float:
    """GPTModel (local spec, one rank) holding ``hf``'s weights: the mean per-token loss it returns."""
    from megatron.core.transformer.module import Float16Module
    from megatron_gpt import build
    from megatron_gpt.config import TrainConfig
    from megatron_gpt.hf_weights import from_hf

    cfg = TrainConfig(config=config, seq_len=seq_len)
    tconfig = build.transformer_config(cfg, cpu_init=False)
    tconfig.perform_initialization = False
    if dtype == torch.float32:
        tconfig.bf16, tconfig.params_dtype, tconfig.pipeline_dtype = False, torch.float32, torch.float32
    inputs, labels = batch
    # The local spec's torch norms are made on the CPU whatever the config says; the case's build moves the
    # whole model to its GPU afterwards, and so does this.
    model = build.gpt_model(cfg, tconfig).to(inputs.device)
    weights = {k: v.to(dtype) for k, v in from_hf(hf, cfg.model).items()}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if unexpected or any(not key.endswith("_extra_state") for key in missing):
        raise KeyError(f"GPTModel did not take the weights: missing {missing}, unexpected {unexpected}")
    wrapped = Float16Module(tconfig, model) if dtype == torch.bfloat16 else model
    wrapped.eval()
    positions = torch.arange(seq_len, device=inputs.device).unsqueeze(0)
    with torch.no_grad():
        per_token = wrapped(inputs, positions, None, labels=labels)
    return float(per_token.float().mean())


def compare(args: argparse.Namespace, device: torch.device) -> dict:
    """Both cases' first-step losses, their differences and whether each is within its tolerance."""
    from megatron_gpt import build
    from megatron_gpt.config import TrainConfig
    from trainstack_train.parallel import init_distributed

    init_distributed(device.type)
    build.init_parallel(TrainConfig(config=args.config, seq_len=args.seq_len, seed=args.seed), device)
    shape = MODEL_CONFIGS[args.config]
    source = BatchSource("synthetic", shape.vocab_size, args.batch_size, args.seq_len, 0, 1, args.seed)
    batch = source.batch(0, device)
    fsdp, hf = fsdp_losses(args.config, args.seq_len, args.seed, batch, device)
    rows = {}
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        megatron = megatron_loss(args.config, args.seq_len, hf, batch, dtype)
        diff = abs(megatron - fsdp[name])
        relative = name == "bfloat16"
        bound = args.bf16_tolerance * abs(fsdp[name]) if relative else args.tolerance
        rows[name] = {
            "pytorch_fsdp": fsdp[name],
            "megatron_gpt": megatron,
            "abs_diff": diff,
            "tolerance": args.bf16_tolerance if relative else args.tolerance,
            "tolerance_kind": "relative" if relative else "absolute",
            "within_tolerance": diff <= bound,
        }
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="llama3_2_1b", choices=sorted(MODEL_CONFIGS))
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--bf16-tolerance", type=float, default=2.0**-8)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rows = compare(args, device)
    result = {
        "benchmark": "megatron_first_loss_parity",
        "config": args.config,
        "batch_size": args.batch_size,
        "seq_len": args.seq_len,
        "seed": args.seed,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "first_loss": rows,
        "within_tolerance": all(row["within_tolerance"] for row in rows.values()),
    }
    text = json.dumps(result, indent=2, sort_keys=True) + "\n"
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
    sys.stdout.write(text)
    return 0 if result["within_tolerance"] else 1


if __name__ == "__main__":
    sys.exit(main())
