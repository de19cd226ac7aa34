"""Two lab nodes booted from one local image: each has its own SSH host keys, machine id and cluster address;
the image carries no munge key (nor any other per-host secret), and the munge key the nodes end up sharing is
the one the cluster's configuration step (roles/munge, head node first) gave them."""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from pathlib import Path

import pytest

from tests.support import VENV_BIN, lab_ssh, run

from .conftest import FLAVOUR, LAB_SSH_VARS, STACK

pytestmark = pytest.mark.lab
HERE = "tests/integration/image"
NAMES = ["ts-m-image-id1", "ts-m-image-id2"]
FIRST_OCTET = 158
ADDRESSES = [f"10.77.0.{FIRST_OCTET + i}" for i in range(len(NAMES))]
# Per-host files the image must not carry (each node makes its own, or receives them from the cluster).
HOST_SECRETS = [
    "./etc/munge/munge.key",
    "./var/lib/systemd/random-seed",
    "./etc/trainstack/cluster-address.env",
]


def on(address: str, command: str) -> str:
    proc = lab_ssh(address, command, timeout=60)
    assert proc.returncode == 0, f"{command!r} on {address}: {proc.stderr.strip()}"
    return proc.stdout.strip()


def image_members(image: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(image) as tar:
        return {member.name: member for member in tar.getmembers()}


def image_munge_file_hashes(image: Path) -> set[str]:
    """sha256 of every regular file under etc/munge in the image (a key the packages made would be one)."""
    hashes = set()
    with tarfile.open(image) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.startswith("./etc/munge/"):
                hashes.add(hashlib.sha256(tar.extractfile(member).read()).hexdigest())
    return hashes


@pytest.fixture(scope="module")
def image(local_image) -> Path:
    outdir, _ = local_image
    return outdir / f"trainstack-{STACK}-{FLAVOUR}-debian12.rootfs.tar"


@pytest.fixture(scope="module")
def booted(image, lab_required, tmp_path_factory):
    """Both nodes up from the image, before any configuration; yields the lab inventory written for them."""
    inventory = tmp_path_factory.mktemp("identity") / "hosts.yml"
    book = [
        str(VENV_BIN / "ansible-playbook"),
        f"{HERE}/boot_lab_node.yml",
        "-e",
        f"boot_first_octet={FIRST_OCTET}",
    ]
    names = ["-e", json.dumps({"boot_node_names": NAMES})]
    run([*book, *names, "-e", "boot_node_state=absent"])
    run([*book, *names, "-e", f"boot_image={image}", "-e", f"boot_inventory={inventory}"])
    try:
        yield inventory
    finally:
        run([*book, *names, "-e", "boot_node_state=absent"])


@pytest.fixture(scope="module")
def configured(booted):
    """The cluster's configuration step: roles/munge, whose head node makes the key every node receives."""
    proc = run(
        [str(VENV_BIN / "ansible-playbook"), "-i", str(booted), f"{HERE}/munge_lab_nodes.yml", *LAB_SSH_VARS],
        timeout=600,
    )
    return proc


def test_image_tarball_carries_no_host_identity(image):
    members = image_members(image)
    machine_id = members["./etc/machine-id"]
    assert machine_id.isfile() and machine_id.size == 0, "machine-id must be an empty file (systemd fills it)"
    assert not [name for name in members if name.startswith("./etc/ssh/ssh_host_")]
    assert [path for path in HOST_SECRETS if path in members] == []
    assert not [name for name in members if name.startswith("./var/lib/cloud/instances/")]
    # The first-boot step that makes them is in the image, and enabled.
    assert "./usr/local/sbin/trainstack-host-identity" in members
    wants = "./etc/systemd/system/multi-user.target.wants/"
    assert {wants + "trainstack-host-keys.service", wants + "trainstack-cluster-address.service"} <= set(
        members
    )


def test_nodes_boot_clean_and_each_makes_its_own_identity(booted):
    states = [on(address, "systemctl is-system-running --wait || true") for address in ADDRESSES]
    assert states == ["running", "running"], "munge, without a key yet, must be skipped, not failed"
    host_keys = [on(address, "cat /etc/ssh/ssh_host_ed25519_key.pub").split()[1] for address in ADDRESSES]
    machine_ids = [on(address, "cat /etc/machine-id") for address in ADDRESSES]
    assert all(re.fullmatch(r"[0-9a-f]{32}", mid) for mid in machine_ids), machine_ids
    assert host_keys[0] != host_keys[1]
    assert machine_ids[0] != machine_ids[1]
    # Each node recorded its own cluster address for the exporters baked into the image.
    for address in ADDRESSES:
        assert on(address, "cat /etc/trainstack/cluster-address.env").endswith(
            f"TRAINSTACK_CLUSTER_ADDRESS={address}"
        )


def test_munge_waits_for_the_cluster_key(booted):
    for address in ADDRESSES:
        assert on(address, "test -e /etc/munge/munge.key && echo present || echo absent") == "absent"
        assert on(address, "systemctl show -p ConditionResult --value munge") == "no"


def test_munge_key_comes_from_the_cluster(image, configured):
    digests = [on(address, "sha256sum /etc/munge/munge.key").split()[0] for address in ADDRESSES]
    assert digests[0] == digests[1], "every node holds the head node's key"
    assert "./etc/munge/munge.key" not in image_members(image)
    assert digests[0] not in image_munge_file_hashes(image), "the key is nothing the image carried"
    assert on(ADDRESSES[0], "stat -c '%U %a' /etc/munge/munge.key") == "munge 400"
    # A credential made on the head decodes on the other node: one key, and munged runs on both.
    credential = on(ADDRESSES[0], "munge -n")
    decoded = lab_ssh(ADDRESSES[1], f"echo '{credential}' | unmunge", timeout=60)
    assert decoded.returncode == 0 and "STATUS:          Success (0)" in decoded.stdout, (
        decoded.stdout + decoded.stderr
    )
