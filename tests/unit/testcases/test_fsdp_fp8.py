"""``--precision fp8`` of pytorch/fsdp: refused by name where the GPU has no FP8; checked without a GPU.

The rule (compute capability 8.9 or newer) is checked against every GPU type of the instance catalog, whose
``gpu_arch`` the launcher hands the job as TRAINSTACK_GPU_ARCH; the refusal happens before a model exists.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from fsdp_llama import fp8
from fsdp_llama.config import TrainConfig
from fsdp_llama.loop import build_model
from fsdp_llama.model import Transformer
from fsdp_llama.parallel import init_distributed

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
import catalog_peak

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

    monkeypatch.setattr("fsdp_llama.loop.Transformer", counting)
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
