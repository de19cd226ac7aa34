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
    :mod:`trainstack_train.xent_triton`'s two-pass kernel, imported only when asked for (Triton comes with
    CUDA torch).
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


# --------------------------------------------------------------------------- the LM head in float8 (opt-in)
# Float8 formats of the head: e4m3 for the hidden states and the weight, e5m2 for the logit gradient, as
# torchao's tensorwise recipe does for the block linears.
E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
# (softmax - onehot) lies in [-1, 1]: the logit gradient is written times this power of two, so e5m2 keeps
# values down to 2**-31 of the largest without measuring an amax (the bound is known before the kernel runs).
GRAD_MULTIPLIER = 2.0**15
# cuBLASLt's float8 GEMMs (torch._scaled_mm) need every dimension divisible by 16.
FP8_ALIGN = 16


def fp8_head_fits(tokens: int, dim: int, vocab: int, chunk_tokens: int) -> bool:
    """Whether every float8 GEMM of the head has 16-divisible dimensions (else the bf16 head runs)."""
    return all(size % FP8_ALIGN == 0 for size in (tokens, dim, vocab, min(chunk_tokens, tokens)))


def quantize_head(
    x: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x`` in e4m3 twice: by rows with one scale each, and transposed with one scale for the whole tensor.

    The rows (one scale per token of the hidden states, per vocabulary entry of the weight) feed the logits'
    GEMM, whose output is the loss itself; a single scale would round small rows (rare tokens' embeddings)
    more coarsely than large ones. The transposed copy feeds the gradient GEMMs (cuBLASLt's float8 GEMM takes
    only K-contiguous operands, and e5m2 gradients pair only with tensorwise scales there). Returns the rows,
    their inverse scales ``[rows, 1]``, the transpose and its inverse scale. Compiled: two reads of ``x``.
    """
    top = torch.finfo(E4M3).max
    x32 = x.float()
    row_amax = x32.abs().amax(dim=1, keepdim=True).clamp(min=1e-12)
    rows = (x32 * (top / row_amax)).clamp(-top, top).to(E4M3)
    amax = row_amax.amax()
    whole = (x32 * (top / amax)).clamp(-top, top).to(E4M3)
    return rows, row_amax / top, whole.t().contiguous(), amax / top


def transpose_fp8(x: torch.Tensor) -> torch.Tensor:
    """A float8 matrix transposed into a new contiguous one (bytes moved as bytes)."""
    return x.view(torch.uint8).t().contiguous().view(x.dtype)


def _chunk_grad_fp8(
    kernel: str, logits: torch.Tensor, targets: torch.Tensor, multiplier: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunk's summed loss and ``GRAD_MULTIPLIER * (softmax - onehot)`` in e5m2 (the Triton kernel
    writes e5m2 directly; the torch references round their output to it)."""
    if kernel == "triton":
        from .xent_triton import ce_chunk_forward_backward_triton

        return ce_chunk_forward_backward_triton(logits, targets, multiplier, grad_dtype=E5M2)
    loss_sum, grad = chunk_function(kernel)(logits, targets, multiplier)
    return loss_sum, grad.to(E5M2)


class _Float8LinearCrossEntropy(_FusedLinearCrossEntropy):
    """:class:`_FusedLinearCrossEntropy` (whose backward it shares: both compute the gradients in the forward
    pass) with its three GEMMs in float8 (fp32 accumulate): the logits' GEMM
    with one scale per token and per vocabulary entry, the two gradient GEMMs with one scale per tensor.

    The logits come out of the GEMM in bf16, the loss and softmax stay fp32 as in the bf16 head; the logit
    gradient is kept in e5m2 for the whole step (2.1 GB at 16k tokens of a 128k vocabulary), transposed, so
    the weight gradient is one GEMM over all tokens instead of one accumulation per chunk.
    """

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        chunk_tokens: int,
        kernel: str,
    ) -> torch.Tensor:
        quantize = compile_once(quantize_head, dynamic=False) if hidden.is_cuda else quantize_head
        transpose = compile_once(transpose_fp8, dynamic=False) if hidden.is_cuda else transpose_fp8
        h8, h_row_inv, h8_t, h_inv = quantize(hidden)
        w8, w_row_inv, w8_t, w_inv = quantize(weight)
        w_row_inv = w_row_inv.reshape(1, -1)
        valid = (targets != IGNORE_INDEX).sum().clamp(min=1).to(torch.float32)
        multiplier = torch.full((), GRAD_MULTIPLIER, dtype=torch.float32, device=hidden.device)
        g_inv = 1.0 / (valid * GRAD_MULTIPLIER)
        grad_hidden = torch.empty_like(hidden)
        grad_t = torch.empty((weight.shape[0], hidden.shape[0]), dtype=E5M2, device=hidden.device)
        loss_sum = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for start in range(0, hidden.shape[0], chunk_tokens):
            end = min(start + chunk_tokens, hidden.shape[0])
            logits = torch._scaled_mm(
                h8[start:end],
                w8.t(),
                h_row_inv[start:end],
                w_row_inv,
                out_dtype=hidden.dtype,
                use_fast_accum=True,
            )
            chunk_loss, g8 = _chunk_grad_fp8(kernel, logits, targets[start:end], multiplier)
            del logits
            loss_sum += chunk_loss
            grad_hidden[start:end] = torch._scaled_mm(g8, w8_t.t(), g_inv, w_inv, out_dtype=hidden.dtype)
            grad_t[:, start:end] = transpose(g8)
        grad_weight = torch._scaled_mm(grad_t, h8_t.t(), g_inv, h_inv, out_dtype=weight.dtype)
        ctx.save_for_backward(grad_hidden, grad_weight)
        return (loss_sum / valid).to(accumulation_dtype(weight.dtype))


def float8_linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk_tokens: int = 4096,
    kernel: str = "eager",
) -> torch.Tensor:
    """Mean cross-entropy of ``hidden @ weight.T`` with the three GEMMs in float8; bf16 where they cannot be.

    Falls back to :func:`fused_linear_cross_entropy` when a dimension is not 16-divisible.
    """
    if not fp8_head_fits(hidden.shape[0], hidden.shape[1], weight.shape[0], chunk_tokens):
        return fused_linear_cross_entropy(hidden, weight, targets, chunk_tokens, kernel)
    return _Float8LinearCrossEntropy.apply(hidden, weight, targets, chunk_tokens, kernel)
