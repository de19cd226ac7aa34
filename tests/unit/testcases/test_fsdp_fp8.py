"""``--precision fp8`` of pytorch/fsdp: refused by name where the GPU has no FP8; checked without a GPU.

The rule (compute capability 8.9 or newer) is checked against every GPU type of the instance catalog, whose
``gpu_arch`` the launcher hands the job as TRAINSTACK_GPU_ARCH; the refusal happens before a model exists.
"""

from __future__ import annotations

import pytest
import torch
from trainstack_train import fp8
from trainstack_train.config import TrainConfig
from trainstack_train.loop import build_model
from trainstack_train.model import Transformer
from trainstack_train.parallel import init_distributed

from bench import catalog_peak

CATALOG = catalog_peak.catalog()

FP8_ARCHS = {"sm_89", "sm_90", "sm_100", "sm_103"}
PARTS = ("attention.wqkv", "attention.wo", "feed_forward.w1", "feed_forward.w2", "feed_forward.w3")


def test_parse_arch() -> None:
    assert fp8.parse_arch("sm_89") == (8, 9)
    assert fp8.parse_arch("sm_90") == (9, 0)
    assert fp8.parse_arch("sm_100") == (10, 0)
    with pytest.raises(ValueError, match="TRAINSTACK_GPU_ARCH must look like sm_90"):
        fp8.parse_arch("hopper")


@pytest.mark.parametrize("instance_type", [n for n in CATALOG.names() if CATALOG.get(n).gpu_arch])
def test_each_catalog_gpu_is_accepted_or_refused_by_its_arch(instance_type: str) -> None:
    arch = CATALOG.get(instance_type).gpu_arch
    reason = fp8.fp8_refusal("cuda", arch, "catalog")
    if arch in FP8_ARCHS:
        assert reason is None
    else:
        assert reason is not None
        assert "--precision fp8 needs a GPU with FP8 tensor cores" in reason
        assert arch in reason


def test_the_catalog_arch_from_the_launcher_refuses_an_a100_without_touching_the_gpu() -> None:
    arch = CATALOG.get("p4d.24xlarge").gpu_arch
    expected = r"this GPU is sm_80 \(TRAINSTACK_GPU_ARCH, from the instance catalog\)"
    with pytest.raises(ValueError, match=expected):
        fp8.check_fp8("fp8", torch.device("cuda"), {fp8.GPU_ARCH_ENV: arch})


def test_cpu_is_refused_and_bf16_always_passes() -> None:
    with pytest.raises(ValueError, match="this run's device is cpu"):
        fp8.check_fp8("fp8", torch.device("cpu"), {})
    fp8.check_fp8("bf16", torch.device("cpu"), {})
    fp8.check_fp8("bf16", torch.device("cuda"), {fp8.GPU_ARCH_ENV: "sm_70"})


def test_missing_torchao_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fp8.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match="needs the torchao package"):
        fp8.check_fp8("fp8", torch.device("cuda"), {fp8.GPU_ARCH_ENV: "sm_90"})


def test_config_rejects_unknown_precision_and_fp8_over_fp32() -> None:
    with pytest.raises(ValueError, match="--precision must be one of"):
        TrainConfig(precision="fp16").validate()
    with pytest.raises(ValueError, match="--fp8-recipe must be one of"):
        TrainConfig(precision="fp8", fp8_recipe="blockwise").validate()
    with pytest.raises(ValueError, match="cannot be combined with --mixed-precision fp32"):
        TrainConfig(precision="fp8", mixed_precision="fp32").validate()


def test_build_refuses_fp8_on_cpu_before_any_model(gloo_world, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[object] = []

    def counting(*args: object, **kwargs: object) -> Transformer:
        built.append(args)
        return Transformer(*args, **kwargs)

    monkeypatch.setattr("trainstack_train.loop.Transformer", counting)
    cfg = TrainConfig(precision="fp8", device="cpu")
    cfg.validate()
    with pytest.raises(ValueError, match="--precision fp8 needs a GPU"):
        build_model(cfg, init_distributed("cpu"))
    assert built == []


def test_only_block_linears_are_eligible() -> None:
    with torch.device("meta"):
        model = Transformer(TrainConfig().model)
    eligible = [name for name, module in model.named_modules() if fp8._fp8_eligible(module, name)]
    assert "output" not in eligible
    assert sorted(eligible) == sorted(
        f"layers.{i}.{part}" for i in range(TrainConfig().model.n_layers) for part in PARTS
    )


def test_fp8_head_needs_fp8_and_a_boolean() -> None:
    with pytest.raises(ValueError, match=r"--fp8-head true .* needs --precision fp8"):
        TrainConfig(fp8_head="true").validate()
    with pytest.raises(ValueError, match="--fp8-head must be true or false"):
        TrainConfig(precision="fp8", fp8_head="yes").validate()
    TrainConfig(precision="fp8", fp8_head="true").validate()


def test_fp8_head_runs_only_where_every_gemm_is_16_divisible() -> None:
    from trainstack_train.loss import fp8_head_fits

    assert fp8_head_fits(16384, 2048, 128256, 4096)
    assert not fp8_head_fits(16384 + 8, 2048, 128256, 4096)  # a last chunk of 8 tokens
    assert not fp8_head_fits(16384, 2048, 128250, 4096)
    assert not fp8_head_fits(16384, 2048, 128256, 4100)


def test_fp8_head_tracks_the_bf16_head_on_cpu() -> None:
    """The float8 head's loss and both gradients stay near the bf16 head's (torch's CPU float8 GEMM)."""
    from trainstack_train.loss import IGNORE_INDEX, float8_linear_cross_entropy, fused_linear_cross_entropy

    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(64, 32, generator=gen).bfloat16()
    weight = (0.02 * torch.randn(160, 32, generator=gen)).bfloat16()
    targets = torch.randint(0, 160, (64,), generator=gen)
    targets[:16] = IGNORE_INDEX
    results = []
    for head in (fused_linear_cross_entropy, float8_linear_cross_entropy):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        loss = head(h, w, targets, 32, "eager")
        loss.backward()
        results.append((loss.item(), h.grad.float(), w.grad.float()))
    (ref, ref_gh, ref_gw), (loss, gh, gw) = results
    assert abs(loss - ref) / ref < 1e-2
    assert ((gh - ref_gh).norm() / ref_gh.norm()).item() < 0.1
    assert ((gw - ref_gw).norm() / ref_gw.norm()).item() < 0.1
    assert gh[:16].abs().max().item() == 0.0
