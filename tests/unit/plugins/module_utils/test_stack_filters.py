"""Filters the image roles use (plugins/filter/stack.py): OS ids, versions, manifest and self-check."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.trainstack.cluster.plugins.filter import stack as f
from ansible_collections.trainstack.cluster.plugins.module_utils.stack import stack_matrix as sm


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (
            {"distribution": "Ubuntu", "distribution_version": "24.04", "distribution_major_version": "24"},
            "ubuntu-24.04",
        ),
        (
            {"distribution": "Debian", "distribution_version": "12.15", "distribution_major_version": "12"},
            "debian-12",
        ),
        (
            {"distribution": "Amazon", "distribution_version": "2023", "distribution_major_version": "2023"},
            "amzn-2023",
        ),
    ],
)
def test_stack_os_id(facts, expected):
    assert f.stack_os_id(facts) == expected


def test_stack_os_id_refuses_unknown_distributions():
    with pytest.raises(AnsibleFilterError, match="'Gentoo' is not in any stack"):
        f.stack_os_id({"distribution": "Gentoo"})


@pytest.mark.parametrize(
    ("installed", "pinned", "ok"),
    [
        ("13.2.51", "13.2", True),
        ("13.1.0", "13.2", False),
        ("22.05.8-4", "22.05.8", True),
        ("2.13.0+cpu", "2.13.0", True),
        ("1.34.2", "1.34", True),
        ("1.33.9", "1.34", False),
        (None, "1.0", False),
    ],
)
def test_version_matches(installed, pinned, ok):
    assert sm.version_matches(installed, pinned) is ok


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("slurm 22.05.8\n", "22.05.8"),
        ("NVIDIA Container Toolkit CLI version 1.20.1\ncommit: 1a2b", "1.20.1"),
        ("Kubernetes v1.34.2-eks-113cf36", "1.34.2"),
        ("2.13.0+cpu\n", "2.13.0+cpu"),
        ("torch 2.13.0+cu130.post1", "2.13.0+cu130.post1"),
        ("libnccl2 2.29.7-1+cuda13.0", "2.29.7"),
        ("", None),
        ("no version here", None),
    ],
)
def test_first_version(text, version):
    assert f.stack_first_version(text) == version


def test_manifest_components_pairs_probe_output_with_pins():
    results = [{"item": "slurm", "stdout": "slurm 22.05.8"}, {"item": "nccl", "stdout": ""}]
    got = f.stack_manifest_components(results, {"slurm": "22.05.8", "nccl": "2.29.7"})
    assert got == {
        "slurm": {"pinned": "22.05.8", "installed": "22.05.8", "matches": True},
        "nccl": {"pinned": "2.29.7", "installed": None, "matches": False},
    }


def test_selfcheck_versions():
    components = {
        "slurm": {"pinned": "22.05.8", "installed": "22.05.8"},
        "nccl": {"pinned": "2.29.7", "installed": "2.28.9"},
        "pytorch": {"pinned": "2.13.0", "installed": None},
        "cuda": {"pinned": "13.2", "installed": None},
    }
    checks = {
        c["check"]: c for c in f.stack_selfcheck_versions(components, ["slurm", "nccl", "cuda", "enroot"])
    }
    assert checks["version:slurm"]["status"] == "pass"
    assert checks["version:nccl"] == {
        "check": "version:nccl",
        "status": "fail",
        "detail": "installed 2.28.9, stack pins 2.29.7",
    }
    assert checks["version:pytorch"]["status"] == "skip"
    assert checks["version:cuda"]["status"] == "fail" and checks["version:cuda"]["detail"] == "not installed"
    assert checks["version:enroot"]["status"] == "fail"
    assert (
        f.stack_selfcheck_line(checks["version:nccl"])
        == "FAIL version:nccl: installed 2.28.9, stack pins 2.29.7"
    )


def test_artifact_path_keeps_plus_signs():
    art = {"name": "torch", "url": "https://h/whl/torch-2.13.0%2Bcpu-cp311.whl"}
    assert f.stack_artifact_path(art) == "torch/torch-2.13.0+cpu-cp311.whl"


def test_filters_wrap_stack_errors(shipped_stacks):
    with pytest.raises(AnsibleFilterError, match="outside scope"):
        f.stack_versions(shipped_stacks["ts-2026.10"], "ubuntu-20.04", "x86_64")
