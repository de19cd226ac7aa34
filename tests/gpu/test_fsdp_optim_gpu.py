"""The compiled MasterWeightAdamW update on the GPU against PyTorch's fused AdamW on fp32 parameters.

This is the kernel the unsharded (one-GPU) path runs every step; the CPU tests check the eager version.
Same bf16 gradients (upcast for the reference), clipping through grad_scale, four steps.
"""

import pytest
import torch

pytestmark = pytest.mark.gpu

from trainstack_train.optim import MasterWeightAdamW  # noqa: E402

SHAPES = [(4096, 2048), (2048,), (512, 2048)]


def _params():
    gen = torch.Generator(device="cuda").manual_seed(0)
    return [torch.nn.Parameter(torch.randn(s, generator=gen, device="cuda") * 0.02) for s in SHAPES]


def test_compiled_update_matches_fused_adamw():
    reference, ours = _params(), _params()
    kwargs = {"lr": 3e-4, "betas": (0.9, 0.95), "weight_decay": 0.1}
    ref_opt = torch.optim.AdamW(reference, fused=True, **kwargs)
    our_opt = MasterWeightAdamW(ours, compiled=True, **kwargs)
    gen = torch.Generator(device="cuda").manual_seed(1)
    for _ in range(4):
        scale = torch.tensor(3.0, device="cuda")
        for ref, mine in zip(reference, ours, strict=True):
            grad = torch.randn(ref.shape, generator=gen, device="cuda").to(torch.bfloat16)
            ref.grad, mine.grad = grad.float(), grad
        ref_opt.grad_scale, our_opt.grad_scale = scale, scale
        ref_opt.step()
        our_opt.step()
    for ref, mine in zip(reference, ours, strict=True):
        master = our_opt.state[mine]["master"]
        assert torch.allclose(master, ref.detach(), rtol=1e-5, atol=1e-7)
        assert torch.equal(mine.detach(), master.to(torch.bfloat16))
