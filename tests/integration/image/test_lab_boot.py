"""A lab node booted from the local image: systemd runs, SSH answers with the node's own host key, and
/etc/trainstack/image.json is the one the build wrote."""

import json

import pytest

from tests.support import VENV_BIN, lab_ssh, run

from .conftest import FLAVOUR, LAB_SSH_VARS, STACK

pytestmark = pytest.mark.lab
ADDRESS = "10.77.0.157"
HERE = "tests/integration/image"


def ssh(*command):
    return lab_ssh(ADDRESS, *command, timeout=60)


@pytest.fixture
def booted_node(local_image, lab_required, tmp_path):
    outdir, _ = local_image
    # As make demo does: the lab is given the build's Packer manifest and reads the rootfs path from it.
    image = outdir / "packer-manifest.json"
    book = [str(VENV_BIN / "ansible-playbook"), f"{HERE}/boot_lab_node.yml"]
    run([*book, "-e", "boot_node_state=absent"])
    run([*book, "-e", f"boot_image={image}", "-e", f"boot_inventory={tmp_path}/hosts.yml"])
    try:
        yield outdir
    finally:
        run([*book, "-e", "boot_node_state=absent"])


def test_lab_node_boots_from_the_image_and_reads_image_json(booted_node):
    state = ssh("systemctl", "is-system-running", "--wait")
    assert state.stdout.strip() in {"running", "degraded"}, state.stdout + state.stderr
    got = ssh("cat", "/etc/trainstack/image.json")
    assert got.returncode == 0, got.stderr
    manifest = json.loads(got.stdout)
    assert manifest == json.loads((booted_node / "image.json").read_text())
    assert (manifest["stack"], manifest["flavour"]) == (STACK, FLAVOUR)
    # The image carried no host key; the node made its own at first boot.
    keys = ssh("ls", "/etc/ssh/")
    assert "ssh_host_ed25519_key" in keys.stdout
    assert ssh("test", "-s", "/etc/machine-id").returncode == 0, "systemd gave the node a machine id"
    # The image's CPU PyTorch computes on the booted node, and its Slurm tools are installed.
    probe = "'import torch; print(torch.__version__, int(torch.ones(3).sum()))'"
    torch = ssh("/opt/trainstack/venv/bin/python", "-c", probe)
    assert torch.stdout.strip() == "2.13.0+cpu 3", torch.stderr
    # slurmd -V reads no configuration (the image's Slurm is installed, not configured: sinfo would fail).
    assert ssh("slurmd", "-V").stdout.split()[-1] == manifest["components"]["slurm"]["installed"]


def test_a_launch_on_the_node_runs_in_the_environment_the_image_baked(booted_node, tmp_path):
    # The image baked pytorch/ddp's lab environment (make image-local's LOCAL_TESTCASES); a launch on the node
    # finds it by the key it computes itself and builds no virtualenv.
    manifest = json.loads((booted_node / "image.json").read_text())
    envs = {env["case"]: env for env in manifest.get("testcase_envs", [])}
    assert "pytorch/ddp" in envs, manifest.get("testcase_envs_skipped")
    env = envs["pytorch/ddp"]
    shared = "/var/tmp/ts-shared"
    proc = run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            str(tmp_path / "hosts.yml"),
            "playbooks/launch_training.yml",
            "-e",
            "launch_host=ts-m-image-boot",
            "-e",
            "training_job_testcase=pytorch/ddp",
            "-e",
            "training_job_launcher=local",
            "-e",
            f"training_job_shared_dir={shared}",
            "-e",
            f"training_job_results_dir={tmp_path / 'results'}",
            "-e",
            "training_job_name=it-baked",
            *LAB_SSH_VARS,
        ]
    )
    assert f"venv: baked {env['path']}" in proc.stdout, proc.stdout[-3000:]
    built = f"{shared}/trainstack/venvs/pytorch-ddp-{env['key']}"
    assert ssh("test", "-e", built).returncode != 0, f"a virtualenv was built: {built}"
    # The results come back to the controller, beside the test.
    (summary,) = (tmp_path / "results").glob("*/summary.json")
    assert json.loads(summary.read_text())["torch_version"].split("+")[0] == env["torch"]
