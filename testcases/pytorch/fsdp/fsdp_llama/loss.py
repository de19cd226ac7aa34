"""Fused linear cross-entropy: the output projection and the loss, chunk by chunk over tokens.

Why: for a 128k vocabulary, ``batch 8 x 2048`` tokens make fp32 logits of 8.4 GB, plus their bf16 copy and
gradient; Hugging Face materialises all of them. Here each chunk's logits are made, turned into loss and
logit-gradient at once (softmax minus one-hot), multiplied back into the hidden-state and weight gradients,
and dropped. The backward pass then only scales the stored gradients, so no matmul is recomputed and peak
memory holds one chunk of logits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .compiled import compile_once
from .config import LOSS_KERNELS

IGNORE_INDEX = -100


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for bf16/fp16/fp32 work, fp64 kept as is (the reference tests run in fp64)."""
    return torch.promote_types(dtype, torch.float32)


ChunkFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def ce_chunk_forward_backward(
    logits: torch.Tensor, targets: torch.Tensor, scale: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed loss of one chunk and ``scale * d(sum loss)/d(logits)``, in the logits dtype.

    The softmax is taken in fp32 (fp64 stays fp64); folding the 1/tokens scale in here means the gradient
    matmuls below produce final values and no separate scaling pass over them is needed.
    """
    x = logits.to(accumulation_dtype(logits.dtype))
    lse = torch.logsumexp(x, dim=-1)
    valid = targets != IGNORE_INDEX
    safe = torch.where(valid, targets, torch.zeros_like(targets))
    picked = x.gather(1, safe[:, None]).squeeze(1)
    loss_sum = ((lse - picked) * valid).sum()
    probs = torch.exp(x - lse[:, None])
    onehot = torch.zeros_like(probs).scatter_(1, safe[:, None], 1.0)
    grad = (probs - onehot) * (valid[:, None] * scale)
    return loss_sum, grad.to(logits.dtype)


def chunk_function(kernel: str) -> ChunkFn:
    """The per-chunk kernel: the torch reference, as written or compiled, or the Triton kernel.

    ``compiled`` fuses upcast, log-sum-exp and softmax-minus-one-hot into one Inductor kernel; ``triton`` is
    :mod:`fsdp_llama.xent_triton`'s two-pass kernel, imported only when asked for (Triton comes with CUDA
    torch).
    """
    if kernel == "triton":
        from .xent_triton import ce_chunk_forward_backward_triton

        return ce_chunk_forward_backward_triton
    if kernel == "compiled":
        return compile_once(ce_chunk_forward_backward, dynamic=False)
    if kernel == "eager":
        return ce_chunk_forward_backward
    raise ValueError(f"loss kernel must be one of {LOSS_KERNELS}, got {kernel!r}")


class _FusedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        chunk_tokens: int,
        kernel: str,
    ) -> torch.Tensor:
        fn = chunk_function(kernel)
        acc = accumulation_dtype(weight.dtype)
        scale = 1.0 / (targets != IGNORE_INDEX).sum().clamp(min=1).to(acc)
        grad_hidden = torch.empty_like(hidden)
        # The weight gradient stays in the weight's dtype: each chunk is one GEMM with beta=1, which adds the
        # running sum inside the GEMM's fp32 epilogue, so a bf16 sum is rounded once per chunk (4 times for
        # 16k tokens) instead of paying an fp32 buffer plus a cast and an add pass per chunk.
        grad_weight = torch.empty_like(weight)
        loss_sum = torch.zeros((), dtype=acc, device=hidden.device)
        for index, start in enumerate(range(0, hidden.shape[0], chunk_tokens)):
            h = hidden[start : start + chunk_tokens]
            logits = h @ weight.t()
            chunk_loss, grad_logits = fn(logits, targets[start : start + chunk_tokens], scale)
            del logits
            loss_sum += chunk_loss
            torch.matmul(grad_logits, weight, out=grad_hidden[start : start + chunk_tokens])
            if index == 0:
                torch.matmul(grad_logits.t(), h, out=grad_weight)
            else:
                grad_weight.addmm_(grad_logits.t(), h)
        ctx.save_for_backward(grad_hidden, grad_weight)
        return loss_sum * scale

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        grad_hidden, grad_weight = ctx.saved_tensors
        factor = grad_loss.to(grad_hidden.dtype)
        return grad_hidden * factor, grad_weight * factor, None, None, None


def fused_linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk_tokens: int = 4096,
    kernel: str = "eager",
) -> torch.Tensor:
    """Mean cross-entropy of ``hidden @ weight.T`` against ``targets`` (-100 ignored), no full logits."""
    return _FusedLinearCrossEntropy.apply(hidden, weight, targets, chunk_tokens, kernel)
