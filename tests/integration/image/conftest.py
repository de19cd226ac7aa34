"""Image factory integration fixtures: moto's EC2 server with stand-in source AMIs, a local HTTP "vendor" of
real Debian packages, and Packer/Ansible command helpers."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.support import (
    CURRENT_STACK_FILE,
    CURRENT_STACK_ID,
    REPO,
    VENV_BIN,
    ansible_env,
    real_debian_debs,
    serve_directory,
)

# The Kubernetes release the eks-gpu flavour builds for by default, the current stack's (variables.pkr.hcl).
CURRENT_STACK = CURRENT_STACK_ID
EKS_VERSION = yaml.safe_load(CURRENT_STACK_FILE.read_text())["components"]["kubernetes"]["version"]

# Stand-ins for Canonical's and Amazon's source AMIs: moto ships none of the 2026 images our filters select,
# so the test loads these records into moto (MOTO_AMIS_PATH). Only name, owner and architecture matter.
STAND_IN_AMIS = [
    {
        "ami_id": "ami-0standin2204x8601",
        "name": "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-20261101",
        "owner_id": "099720109477",
        "architecture": "x86_64",
        "root_device_name": "/dev/sda1",
    },
    {
        "ami_id": "ami-0standinal2023a01",
        "name": "al2023-ami-2023.9.20261101.0-kernel-6.12-arm64",
        "owner_id": "137112412989",
        "architecture": "arm64",
        "root_device_name": "/dev/xvda",
    },
    # Stand-ins for the EKS-optimized accelerated AL2023 AMIs the eks-gpu flavour starts from (Amazon EKS's
    # account, the name pattern of var.eks_kubernetes_version's release: packer/sources.amazon.pkr.hcl).
    {
        "ami_id": "ami-0standineksx8601",
        "name": f"amazon-eks-node-al2023-x86_64-nvidia-{EKS_VERSION}-v20261101",
        "owner_id": "602401143452",
        "architecture": "x86_64",
        "root_device_name": "/dev/xvda",
    },
    {
        "ami_id": "ami-0standineksa6401",
        "name": f"amazon-eks-node-al2023-arm64-nvidia-{EKS_VERSION}-v20261101",
        "owner_id": "602401143452",
        "architecture": "arm64",
        "root_device_name": "/dev/xvda",
    },
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


@pytest.fixture
def moto_ec2(tmp_path):
    """moto in server mode (a real HTTP endpoint on loopback) with the stand-in AMIs; yields its URL."""
    amis = [
        {
            "state": "available",
            "public": True,
            "image_location": "stand-in",
            "sriov": "simple",
            "root_device_type": "ebs",
            "description": "stand-in source AMI for trainstack tests",
            "image_type": "machine",
            "platform": None,
            "virtualization_type": "hvm",
            "hypervisor": "xen",
            **ami,
        }
        for ami in STAND_IN_AMIS
    ]
    path = tmp_path / "amis.json"
    path.write_text(json.dumps(amis))
    port = _free_port()
    env = {**os.environ, "MOTO_AMIS_PATH": str(path)}
    log = open(tmp_path / "moto.log", "w")  # noqa: SIM115 - closed after the server stops
    proc = subprocess.Popen([str(VENV_BIN / "moto_server"), "-p", str(port)], env=env, stdout=log, stderr=log)
    try:
        _wait_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


@pytest.fixture
def aws_env(monkeypatch):
    """Fake credentials: nothing here may reach AWS."""
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(key, value)


def closed_port() -> int:
    """A loopback port nothing listens on (Packer's SSH wait then fails locally, never off the machine)."""
    return _free_port()


@pytest.fixture(scope="session")
def debian_debs(tmp_path_factory):
    """Two real Debian packages with the sha256 Debian's signed index publishes for them."""
    return real_debian_debs(tmp_path_factory.mktemp("debs"))


@pytest.fixture
def vendor(tmp_path):
    """A loopback HTTP server standing in for a vendor download host; yields (base_url, docroot)."""
    root = tmp_path / "vendor"
    root.mkdir()
    with serve_directory(root) as (url, _requests):
        yield url, root


def packer(*args: str, timeout: int = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run packer from the repository root with the Ansible environment."""
    if shutil.which("packer") is None:
        pytest.skip("packer is not installed (make host-deps)")
    return subprocess.run(
        ["packer", *args],
        cwd=REPO,
        env=env or ansible_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# make test-image builds the current stack (image.mk: STACK defaults to stacks/current).
STACK = CURRENT_STACK
FLAVOUR = "slurm-gpu"


# A local image that `make test-image` builds beside this process (make test runs the two side by side, and
# the tests that boot the image come last, so that the ordered lab tests do not wait for a build): its output
# directory, where build.log appears when the build has succeeded and build.failed when it has not.
PREBUILT_IMAGE_ENV = "TRAINSTACK_TEST_IMAGE"
PREBUILT_IMAGE_WAIT = 2400


def _prebuilt_image(out: Path, wait: float = PREBUILT_IMAGE_WAIT) -> tuple[Path, str]:
    """The image `make test-image` builds into ``out``, once finished; a failed build fails the test."""
    image, log, failed = out / f"local-{FLAVOUR}", out / "build.log", out / "build.failed"
    deadline = time.monotonic() + wait
    while not (log.is_file() or failed.is_file()):
        assert time.monotonic() < deadline, f"no {log} nor {failed} after {wait:.0f} s"
        time.sleep(5)
    assert not failed.is_file(), f"`make test-image` failed:\n{failed.read_text()[-6000:]}"
    assert (image / "packer-manifest.json").is_file(), f"{image} holds no packer-manifest.json"
    return image, log.read_text()


@pytest.fixture(scope="session")
def local_image(tmp_path_factory):
    """One `make image-local` per session, shared by the image tests and the lab boot test.

    Where TRAINSTACK_TEST_IMAGE names the output directory of `make test-image`, that build is used instead.
    """
    if os.geteuid() != 0:
        pytest.skip("LXC image builds need root")
    if os.environ.get(PREBUILT_IMAGE_ENV):
        return _prebuilt_image(Path(os.environ[PREBUILT_IMAGE_ENV]))
    out = tmp_path_factory.mktemp("image")
    proc = subprocess.run(
        ["make", "image-local", f"STACK={STACK}", f"IMAGE_FLAVOUR={FLAVOUR}", f"IMAGE_OUT={out}"],
        cwd=REPO,
        env=ansible_env(),
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    return out / f"local-{FLAVOUR}", proc.stdout


# The lab role's inventory is written for these nodes only: their host keys are new, so nothing is recorded.
LAB_SSH_VARS = [
    "-e",
    json.dumps(
        {
            "ansible_host_key_checking": False,
            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
        }
    ),
]
