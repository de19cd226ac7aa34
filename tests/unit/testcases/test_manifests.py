"""Every test case manifest has exactly the keys launch_training reads, and its defaults really parse."""

import importlib
import importlib.util
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
MANIFESTS = sorted((ROOT / "testcases").glob("*/*/testcase.yml"))
KEYS = {
    "name", "framework", "description", "entrypoint", "arguments", "requirements",
    "environment", "launchers", "metrics", "configs",
}  # fmt: skip
OPTIONAL_KEYS = {"include", "validate_option", "wheelhouse"}
PARSERS = {
    "pytorch/fsdp": "trainstack_train.config",
    "pytorch/ddp": "ddp_ngram.config",
    "nccl/collectives": "nccl_bench.config",
    "torchtitan/llama": "titan_llama.config",
    "megatron/gpt": "megatron_gpt.config",
    "hf/finetune": "hf_finetune.config",
    "jax/llama": "jax_llama.config",
    "deepspeed/zero3": "ds_llama.config",
    "data/prepare": "data_prepare.config",
}


def test_the_catalog_holds_the_cases():
    assert {yaml.safe_load(p.read_text())["name"] for p in MANIFESTS} == set(PARSERS)


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.parent.name)
def test_manifest_shape(path):
    manifest = yaml.safe_load(path.read_text())
    assert KEYS <= set(manifest) <= KEYS | OPTIONAL_KEYS
    assert manifest.get("wheelhouse", "default") in {"default", "slow"}
    assert all((ROOT / "testcases" / inc).is_dir() for inc in manifest.get("include", []))
    assert manifest["name"] == str(path.parent.relative_to(ROOT / "testcases"))
    assert (path.parent / manifest["entrypoint"]).is_file()
    assert set(manifest["launchers"]) <= {"slurm", "local", "kubernetes"} and manifest["launchers"]
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][A-Za-z0-9.+]*", r) for r in manifest["requirements"])
    assert all(isinstance(v, str) for v in manifest["environment"].values())
    assert manifest["metrics"] and all(isinstance(m, str) for m in manifest["metrics"])


def test_requirements_pin_the_torch_the_tests_run_with():
    import torch

    # The slow wheelhouse's cases (torchtitan/llama) are not installed on the controller: make test never
    # downloads their dependencies.
    manifests = [yaml.safe_load(p.read_text()) for p in MANIFESTS]
    pinned = {r for m in manifests if m.get("wheelhouse", "default") == "default" for r in m["requirements"]}
    assert f"torch=={torch.__version__.split('+')[0]}" in pinned
    own = (ROOT / "requirements-testcases.txt").read_text()
    assert all(req in own for req in pinned)


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.parent.name)
def test_default_arguments_are_accepted_by_the_entrypoint(path):
    manifest = yaml.safe_load(path.read_text())
    argv = [part for key, value in manifest["arguments"].items() for part in (f"--{key}", str(value))]
    parser = importlib.import_module(PARSERS[manifest["name"]])
    parser.parse_args(argv)  # exits with status 2, naming the option, if a default were wrong


def test_fsdp_configs_listed_are_the_ones_the_code_knows():
    from trainstack_train.config import MODEL_CONFIGS

    manifest = yaml.safe_load((ROOT / "testcases/pytorch/fsdp/testcase.yml").read_text())
    assert set(manifest["configs"]) == set(MODEL_CONFIGS)


def test_the_slow_wheelhouse_keeps_torchtitan_out_of_make_tests_download():
    """make wheelhouse (run by make test) fetches only the default set; make wheelhouse-slow the slow one."""
    spec = importlib.util.spec_from_file_location("wheelhouse", ROOT / "scripts" / "wheelhouse.py")
    wheelhouse = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wheelhouse)
    default = wheelhouse.requirements(MANIFESTS, "default")
    slow = wheelhouse.requirements(MANIFESTS, "slow")
    assert not any(r.startswith("torchtitan==") for r in default)
    assert "torchtitan==0.2.2" in slow and "torch==2.13.0" in slow and "torch==2.13.0" in default
