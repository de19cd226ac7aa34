"""AdamW on fp32 master weights for a model that holds bf16 parameters: the path taken on one device.

Why: with a single process there is nothing to shard, yet FSDP2's mixed precision still casts every
parameter to bf16 into an all-gather buffer, copies it out, and packs every gradient into an fp32
reduce-scatter buffer, every step (about 4 % of a 1B step on an H200, pure overhead at world size 1).
Here the model itself holds the bf16 parameters and this optimizer holds the fp32 master copy. One fused
update per parameter reads the bf16 gradient, updates the master weight and both moments in fp32 and
writes the new bf16 parameter. The arithmetic is that of FSDP2 with bf16 parameters and fp32 gradient
reduction (at world size 1 the reduction is the identity) followed by ``torch.optim.AdamW``.

The host side matters as much as the kernels: one compiled call per parameter group (not per tensor) keeps
the launch cost of about a hundred updates to one guard check, and the per-step constants reach the GPU
through pinned memory (CUDA may make a copy from pageable memory synchronous for the host, which would stall
the queueing of the next step). Measured on an H200, the host queues a whole 1B step in 31-49 ms against
about 230 ms of GPU time.

Clipping uses the protocol of the fused ``torch.optim.AdamW`` that
:func:`trainstack_train.loop.clip_into_optimizer` relies on: gradients are divided by ``optimizer.grad_scale``
as they are read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from .compiled import compile_once

# The per-group step constants, packed into one small device tensor per step (one copy to the GPU, and
# torch.compile sees a tensor rather than Python floats it would specialise and recompile on).
_STEP_SIZE, _DECAY, _ONE_MINUS_BETA1, _BETA2, _ONE_MINUS_BETA2, _INV_SQRT_BC2, _EPS, _GRAD_SCALE = range(8)

UpdateFn = Callable[..., None]


def adamw_update(
    param: torch.Tensor,
    master: torch.Tensor,
    grad: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    hyper: torch.Tensor,
    grad_scale: torch.Tensor,
) -> None:
    """One AdamW step on flat tensors, in place; written out so torch.compile fuses it into one kernel.

    Same order of operations as ``torch.optim.AdamW`` (decoupled decay, then moments, then the step with
    bias corrections); the new master value is rounded to the parameter's dtype at the end.
    """
    g = grad.to(master.dtype) / grad_scale
    new_avg = exp_avg + (g - exp_avg) * hyper[_ONE_MINUS_BETA1]
    new_avg_sq = exp_avg_sq * hyper[_BETA2] + g * g * hyper[_ONE_MINUS_BETA2]
    denom = new_avg_sq.sqrt() * hyper[_INV_SQRT_BC2] + hyper[_EPS]
    new_master = master * hyper[_DECAY] - hyper[_STEP_SIZE] * new_avg / denom
    exp_avg.copy_(new_avg)
    exp_avg_sq.copy_(new_avg_sq)
    master.copy_(new_master)
    param.copy_(new_master)


def adamw_update_group(
    tensors: list[list[torch.Tensor]], hyper: torch.Tensor, grad_scale: torch.Tensor
) -> None:
    """:func:`adamw_update` for every parameter of a group: ``tensors`` is the five lists, flat views.

    Compiled, this is one graph: one kernel per parameter, all launched from one call.
    """
    for param, master, grad, exp_avg, exp_avg_sq in zip(*tensors, strict=True):
        adamw_update(param, master, grad, exp_avg, exp_avg_sq, hyper, grad_scale)


def update_function(compiled: bool) -> UpdateFn:
    """The eager group update, or its compiled graph (shapes are fixed for a run, so no dynamic sizes)."""
    return compile_once(adamw_update_group, fullgraph=True) if compiled else adamw_update_group


class MasterWeightAdamW(torch.optim.Optimizer):
    """AdamW whose fp32 state (master weight, both moments) lives here while the model computes in bf16.

    Construct it with the model's parameters still in fp32: it keeps them as the master copy and then moves
    the model's parameters to ``compute_dtype``. Doing both here keeps the one invariant (the bf16
    parameter is the rounded master weight) in one place.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        compute_dtype: torch.dtype = torch.bfloat16,
        compiled: bool = False,
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})
        self.grad_scale: torch.Tensor | float = 1.0
        self._update = update_function(compiled)
        with torch.no_grad():
            for param in self._params():
                master = param.detach().clone()
                # Eager state (not lazily at the first step): checkpoint code that finds an empty state
                # would otherwise run a step to create it.
                self.state[param] = {
                    "step": torch.tensor(0.0),
                    "master": master,
                    "exp_avg": torch.zeros_like(master),
                    "exp_avg_sq": torch.zeros_like(master),
                }
                param.data = param.data.to(compute_dtype)

    def _params(self) -> list[torch.Tensor]:
        return [param for group in self.param_groups for param in group["params"]]

    def _hyper(self, group: dict[str, Any], step: float, device: torch.device) -> torch.Tensor:
        beta1, beta2 = group["betas"]
        values = [0.0] * 8
        values[_STEP_SIZE] = group["lr"] / (1.0 - beta1**step)
        values[_DECAY] = 1.0 - group["lr"] * group["weight_decay"]
        values[_ONE_MINUS_BETA1] = 1.0 - beta1
        values[_BETA2] = beta2
        values[_ONE_MINUS_BETA2] = 1.0 - beta2
        values[_INV_SQRT_BC2] = (1.0 - beta2**step) ** -0.5
        values[_EPS] = group["eps"]
        scale = self.grad_scale
        values[_GRAD_SCALE] = 1.0 if isinstance(scale, torch.Tensor) else float(scale)
        host = torch.tensor(values, dtype=torch.float32)
        if device.type == "cuda":
            host = host.pin_memory()
        return host.to(device, non_blocking=True)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        """Update every parameter that has a gradient; ``closure`` is not supported (never needed here)."""
        if closure is not None:
            raise ValueError("MasterWeightAdamW.step does not take a closure")
        for group in self.param_groups:
            live = [param for param in group["params"] if param.grad is not None]
            if not live:
                continue
            step = float(self.state[live[0]]["step"]) + 1.0
            hyper = self._hyper(group, step, live[0].device)
            scale = self.grad_scale if isinstance(self.grad_scale, torch.Tensor) else hyper[_GRAD_SCALE]
            states = [self.state[param] for param in live]
            for state in states:
                state["step"] += 1.0
            tensors = [
                [param.view(-1) for param in live],
                [state["master"].view(-1) for state in states],
                [param.grad.reshape(-1) for param in live],
                [state["exp_avg"].view(-1) for state in states],
                [state["exp_avg_sq"].view(-1) for state in states],
            ]
            self._update(tensors, hyper, scale)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load, keeping the fp32 state in fp32.

        ``Optimizer.load_state_dict`` casts floating-point state to each parameter's dtype, which here is
        bf16: that would round the master weights and moments. The saved values are put back as they were.
        """
        saved = {index: dict(state) for index, state in state_dict["state"].items()}
        super().load_state_dict(state_dict)
        order = [index for group in state_dict["param_groups"] for index in group["params"]]
        for index, param in zip(order, self._params(), strict=True):
            for key, value in saved.get(index, {}).items():
                self.state[param][key] = value.to(param.device) if key != "step" else value.clone()
