"""The Triton cross-entropy kernel against the torch reference, run by Triton's interpreter on this CPU.

``TRITON_INTERPRET=1`` executes the kernel's body with NumPy, program by program, so its arithmetic (the
one-pass log-sum-exp, ignored targets, the one-hot, the scale, the final rounding) is checked here without a
GPU; its speed is measured on the GPU by bench/train_throughput.py, and tests/gpu repeats this check at the
real vocabulary size. The interpreter is chosen when triton is imported, so the cases run in a fresh Python.
"""

import json
import os
import subprocess
import sys

import pytest

from tests.unit.testcases.case_runs import LIBRARY

pytest.importorskip("triton")


SCRIPT = r"""
import json
import torch
from trainstack_train.loss import ce_chunk_forward_backward
from trainstack_train.xent_triton import ce_chunk_forward_backward_triton

def case(name, logits, targets, scale):
    loss, grad = ce_chunk_forward_backward_triton(logits, targets, scale)
    ref_loss, ref_grad = ce_chunk_forward_backward(logits, targets, scale)
    diff = (grad.double() - ref_grad.double()).abs()
    ulp = torch.finfo(logits.dtype).eps
    return name, {
        "loss": loss.item(), "ref_loss": ref_loss.item(), "grad_dtype": str(grad.dtype),
        "max_abs": diff.max().item(), "max_ref": ref_grad.abs().max().item(), "ulp": ulp,
        "finite": bool(torch.isfinite(grad).all() and torch.isfinite(loss)),
        "ignored_rows_zero": bool((grad[targets == -100] == 0).all()),
    }

gen = torch.Generator().manual_seed(7)
targets = torch.randint(0, 300, (9,), generator=gen)
targets[[2, 5]] = -100
logits = torch.randn(9, 300, generator=gen) * 4
huge = logits * 2000.0
out = dict([
    case("fp32", logits, targets, torch.tensor(1 / 7)),
    case("bf16", logits.bfloat16(), targets, torch.tensor(1 / 7)),
    case("huge_logits", huge, targets, torch.tensor(0.5)),
    case("all_ignored", logits[:3], torch.full((3,), -100), torch.tensor(1.0)),
])
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def cases() -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(LIBRARY)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_fp32_loss_and_gradient_equal_the_reference(cases):
    fp32 = cases["fp32"]
    assert fp32["loss"] == pytest.approx(fp32["ref_loss"], rel=1e-6)
    assert fp32["max_abs"] <= 1e-6 * fp32["max_ref"]


def test_bf16_gradient_is_rounded_once_like_the_reference(cases):
    bf16 = cases["bf16"]
    assert bf16["grad_dtype"] == "torch.bfloat16"
    assert bf16["loss"] == pytest.approx(bf16["ref_loss"], rel=1e-6)
    # Both round an fp32 value once; exp's last bit may differ, so at most one bf16 step apart.
    assert bf16["max_abs"] <= bf16["ulp"] * bf16["max_ref"]


def test_logits_in_the_thousands_stay_finite(cases):
    huge = cases["huge_logits"]
    assert huge["finite"]
    assert huge["loss"] == pytest.approx(huge["ref_loss"], rel=1e-6)
    assert huge["max_abs"] <= 1e-6 * huge["max_ref"]


def test_ignored_targets_get_no_loss_and_no_gradient(cases):
    assert cases["fp32"]["ignored_rows_zero"]
    assert cases["all_ignored"]["loss"] == 0.0
    assert cases["all_ignored"]["ignored_rows_zero"]
