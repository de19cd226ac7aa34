"""Verifier for roles/pytorch: torch of the stack's version computes in the image's virtualenv, on both
nodes."""

import json

VENV_PY = "/opt/trainstack/venv/bin/python"


def test_torch_imports_at_the_pinned_cpu_version(host):
    version = host.check_output(f"{VENV_PY} -c 'import torch; print(torch.__version__)'")
    assert version == "2.13.0+cpu"
    assert host.check_output(f"{VENV_PY} -c 'import torch; print(torch.version.cuda)'") == "None"


def test_torch_computes_and_all_reduces(host):
    script = (
        "import os, tempfile, torch, torch.distributed as dist\n"
        "x = torch.randn(64, 64)\n"
        "assert torch.allclose(x @ torch.eye(64), x)\n"
        "store = dist.FileStore(os.path.join(tempfile.mkdtemp(), 's'), 1)\n"
        "dist.init_process_group('gloo', store=store, rank=0, world_size=1)\n"
        "t = torch.ones(3); dist.all_reduce(t); print(int(t.sum()))\n"
    )
    assert host.check_output(f'{VENV_PY} -c "{script}"') == "3"


def test_extra_packages_installed(host):
    assert host.check_output(f"{VENV_PY} -c 'import numpy; print(numpy.__version__)'") == "2.4.6"


def test_record(host):
    record = json.loads(host.file("/etc/trainstack/pytorch.json").content_string)
    assert record == {
        "version": "2.13.0",
        "installed": "2.13.0+cpu",
        "variant": "cpu",
        "venv": "/opt/trainstack/venv",
        "python": VENV_PY,
    }


def test_no_wheelhouse_left_behind(host):
    assert not host.file("/var/cache/trainstack/pytorch-wheels").exists


def test_wheel_came_the_way_the_node_was_told(host):
    """Node 2 fetched the stack's wheel through the artifact layer (kept, checksummed); node 1 did not."""
    wheel = host.file(
        "/var/cache/trainstack/artifacts/torch-cpu-cp311-x86_64/"
        "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    )
    if host.backend.get_hostname() == "ts-m-pytorch-2":
        assert wheel.sha256sum == "6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b"
    else:
        assert not wheel.exists


def test_the_baked_environments_import_the_stacks_torch_and_the_skipped_say_why(host):
    """Node 1 bakes from the controller's wheelhouse; node 2 from the index with the stack's torch wheel
    beside it, and skips DeepSpeed, whose lock pins a wheel built from source that no index serves."""
    record = json.loads(host.file("/etc/trainstack/testcase_envs.json").content_string)
    assert record["target"] == "lab" and record["envs"]
    for env in record["envs"]:
        assert host.file(f"{env['path']}/.complete").exists
        torch = host.check_output(f"{env['path']}/bin/python -c 'import torch; print(torch.__version__)'")
        assert torch == "2.13.0+cpu", env["case"]
    if host.backend.get_hostname() == "ts-m-pytorch-2":
        assert [env["case"] for env in record["envs"]] == ["pytorch/ddp"]
        (skipped,) = record["skipped"]
        assert skipped["case"] == "deepspeed/zero3"
        assert skipped["reason"].startswith("deepspeed==0.19.8 is built from source into a wheelhouse")
