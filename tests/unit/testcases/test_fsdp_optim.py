"""MasterWeightAdamW (the unsharded path's optimizer) against torch.optim.AdamW, on CPU.

The reference is PyTorch's own AdamW on fp32 parameters that receive the same gradients, rounded to bf16
the way the model produces them; ours must keep the fp32 master weights within float rounding of it, and
the model's bf16 parameters must be exactly the rounded master weights.
"""

import copy

import pytest
import torch
from trainstack_train.optim import MasterWeightAdamW

SHAPES = [(16, 8), (8,), (4, 16)]


def _params(dtype=torch.float32):
    gen = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(shape, generator=gen, dtype=dtype)) for shape in SHAPES]


def _grads(step):
    gen = torch.Generator().manual_seed(100 + step)
    return [(torch.randn(shape, generator=gen) * 3).to(torch.bfloat16) for shape in SHAPES]


def _pair(weight_decay=0.1):
    reference = _params()
    ours = _params()
    kwargs = {"lr": 0.05, "betas": (0.9, 0.95), "weight_decay": weight_decay}
    ref_opt = torch.optim.AdamW(reference, foreach=False, **kwargs)
    our_opt = MasterWeightAdamW(ours, compute_dtype=torch.bfloat16, **kwargs)
    return reference, ref_opt, ours, our_opt


def _step(reference, ref_opt, ours, our_opt, step, scale=1.0):
    for ref, mine, grad in zip(reference, ours, _grads(step), strict=True):
        ref.grad = grad.float() / scale
        mine.grad = grad
    our_opt.grad_scale = scale
    ref_opt.step()
    our_opt.step()


def test_master_weights_follow_torch_adamw_and_params_are_their_rounding():
    reference, ref_opt, ours, our_opt = _pair()
    assert all(p.dtype == torch.bfloat16 for p in ours)
    for step in range(4):
        _step(reference, ref_opt, ours, our_opt, step)
    for ref, mine in zip(reference, ours, strict=True):
        master = our_opt.state[mine]["master"]
        assert master.dtype == torch.float32
        assert torch.allclose(master, ref.detach(), rtol=1e-6, atol=1e-7)
        assert torch.equal(mine.detach(), master.to(torch.bfloat16))
        assert our_opt.state[mine]["step"].item() == 4


def test_grad_scale_divides_gradients_as_fused_adamw_does():
    """clip_into_optimizer sets grad_scale = 1 / clip coefficient; the update must see grad / scale."""
    reference, ref_opt, ours, our_opt = _pair(weight_decay=0.0)
    for step in range(3):
        _step(reference, ref_opt, ours, our_opt, step, scale=7.0)
    for ref, mine in zip(reference, ours, strict=True):
        assert torch.allclose(our_opt.state[mine]["master"], ref.detach(), rtol=1e-6, atol=1e-7)


def test_the_comparison_can_fail():
    """A wrong beta2 moves the master weights well outside the tolerance used above."""
    reference, ref_opt, ours, our_opt = _pair()
    our_opt.param_groups[0]["betas"] = (0.9, 0.5)
    for step in range(3):
        _step(reference, ref_opt, ours, our_opt, step)
    masters = [our_opt.state[p]["master"] for p in ours]
    close = [
        torch.allclose(m, r.detach(), rtol=1e-6, atol=1e-7) for m, r in zip(masters, reference, strict=True)
    ]
    assert not all(close)


def test_state_dict_round_trip_keeps_fp32_state():
    """torch's load_state_dict would cast the state to the parameter dtype (bf16); ours must not."""
    _, _, ours, our_opt = _pair()
    for step in range(2):
        for param, grad in zip(ours, _grads(step), strict=True):
            param.grad = grad
        our_opt.step()
    saved = copy.deepcopy(our_opt.state_dict())
    fresh_params = _params()
    fresh = MasterWeightAdamW(fresh_params, lr=0.05, betas=(0.9, 0.95), weight_decay=0.1)
    fresh.load_state_dict(saved)
    for mine, theirs in zip(ours, fresh_params, strict=True):
        for key in ("master", "exp_avg", "exp_avg_sq", "step"):
            loaded = fresh.state[theirs][key]
            assert loaded.dtype == our_opt.state[mine][key].dtype, key
            assert torch.equal(loaded, our_opt.state[mine][key]), key


def test_parameters_without_gradients_are_left_alone():
    _, _, ours, our_opt = _pair()
    before = [p.detach().clone() for p in ours]
    our_opt.step()
    assert all(torch.equal(p, b) for p, b in zip(ours, before, strict=True))
    with pytest.raises(ValueError, match="closure"):
        our_opt.step(lambda: 0.0)


def test_compiled_update_equals_the_eager_one():
    """The path a GPU run takes (one compiled graph per group), here through Inductor's CPU backend."""
    runs = []
    for compiled in (False, True):
        params = _params()
        opt = MasterWeightAdamW(params, lr=0.05, betas=(0.9, 0.95), weight_decay=0.1, compiled=compiled)
        for step in range(3):
            for param, grad in zip(params, _grads(step), strict=True):
                param.grad = grad
            opt.grad_scale = torch.tensor(2.0)
            opt.step()
        runs.append([opt.state[p]["master"] for p in params])
    for eager, compiled in zip(*runs, strict=True):
        assert torch.allclose(eager, compiled, rtol=1e-6, atol=1e-7)
