"""FP8 training of the decoder blocks' linear layers (opt-in: ``--precision fp8``).

The matrix products of the blocks (``wqkv``, ``wo``, ``w1``, ``w2``, ``w3``) run in float8 through torchao's
``Float8Linear``: inputs, weights and output gradients are scaled and cast to e4m3/e5m2 per step, the products
accumulate in fp32, and everything else (embedding, norms, attention, the LM head and the loss, weights,
gradients, master weights and optimizer state) keeps the bf16/fp32 numerics of the default path. The LM head
stays bf16 here: its gradient feeds the tied embedding and the loss is the metric being compared. ``--fp8-head
true`` puts its GEMMs in float8 inside the fused loss instead (:mod:`trainstack_train.loss`), with a scale per
token and per vocabulary entry for the logits, since a Float8Linear there would materialise them.

Why refuse instead of falling back: FP8 tensor cores exist from compute capability 8.9 (Ada, Hopper,
Blackwell). On an older GPU the same option would either fail deep inside a kernel or silently emulate FP8 at
a fraction of bf16 speed. The GPU's architecture comes from the instance catalog when the launcher sets
:data:`GPU_ARCH_ENV` (the catalog's ``gpu_arch`` of the job's instance type), else from the device itself.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping

import torch
from torch import nn

GPU_ARCH_ENV = "TRAINSTACK_GPU_ARCH"
# Compute capability of the first GPUs with FP8 tensor cores (Ada, sm_89); Hopper and Blackwell follow.
FP8_MIN_CAPABILITY = (8, 9)
_ARCH = re.compile(r"^sm_(\d+)(\d)[a-z]?$")
# Float8 GEMMs (cuBLASLt, torch._scaled_mm) need both dimensions of the weight divisible by 16.
_FP8_ALIGN = 16


def parse_arch(arch: str) -> tuple[int, int]:
    """``sm_90`` -> (9, 0), ``sm_89`` -> (8, 9), ``sm_100`` -> (10, 0); anything else is a ValueError."""
    match = _ARCH.match(arch.strip())
    if not match:
        raise ValueError(f"{GPU_ARCH_ENV} must look like sm_90 (the catalog's gpu_arch), got {arch!r}")
    return int(match.group(1)), int(match.group(2))


def fp8_refusal(device_type: str, arch: str | None, source: str) -> str | None:
    """Why ``--precision fp8`` cannot run here, or None when it can.

    ``arch`` is the GPU's ``sm_XY`` from ``source`` (the catalog through the launcher, or the device).
    """
    rule = (
        "--precision fp8 needs a GPU with FP8 tensor cores "
        "(compute capability 8.9 or newer: Ada, Hopper, Blackwell)"
    )
    if device_type != "cuda":
        return f"{rule}; this run's device is {device_type}"
    if arch is None:
        return f"{rule}; the GPU's architecture is unknown"
    if parse_arch(arch) < FP8_MIN_CAPABILITY:
        return f"{rule}; this GPU is {arch} ({source}): use --precision bf16"
    return None


def gpu_arch(device: torch.device, environ: Mapping[str, str]) -> tuple[str | None, str]:
    """The GPU's ``sm_XY`` and its source: the catalog (through the launcher) first, then the device."""
    given = environ.get(GPU_ARCH_ENV, "").strip()
    if given:
        return given, f"{GPU_ARCH_ENV}, from the instance catalog"
    if device.type != "cuda":
        return None, "no GPU"
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}", f"{torch.cuda.get_device_name(device)}"


def check_fp8(precision: str, device: torch.device, environ: Mapping[str, str]) -> None:
    """Refuse ``fp8`` where it cannot run, before any model is built; ``bf16`` always passes."""
    if precision != "fp8":
        return
    arch, source = gpu_arch(device, environ) if device.type == "cuda" else (None, "no GPU")
    reason = fp8_refusal(device.type, arch, source)
    if reason:
        raise ValueError(reason)
    if importlib.util.find_spec("torchao") is None:
        raise ValueError("--precision fp8 needs the torchao package (float8 training) installed beside torch")


def _fp8_eligible(module: nn.Module, fqn: str) -> bool:
    """Block linears with 16-aligned weights; the LM head (``output``) stays bf16."""
    if not isinstance(module, nn.Linear) or not fqn.startswith("layers."):
        return False
    out_features, in_features = module.weight.shape
    return out_features % _FP8_ALIGN == 0 and in_features % _FP8_ALIGN == 0


def convert_to_fp8(model: nn.Module, recipe: str) -> int:
    """Swap the eligible linears for torchao's Float8Linear in place; returns how many were swapped.

    Called on the meta-device model before compile and FSDP, as torchao expects: each compiled block then
    fuses the scaling and casts into its own kernels.
    """
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    config = Float8LinearConfig.from_recipe_name(recipe)
    convert_to_float8_training(model, config=config, module_filter_fn=_fp8_eligible)
    return sum(1 for module in model.modules() if type(module).__name__ == "Float8Linear")
