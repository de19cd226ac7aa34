"""Decisions of roles/nvidia_driver/files/trainstack-nvidia-flavour against fake PCI trees.

The script runs for real (bash); sysfs is a temporary tree with the vendor/device/class files the kernel
exposes, and `modinfo` is a shim on PATH that reports the licence of the "installed" module, because the
decision depends on it and this machine has no NVIDIA module. The molecule scenario nvidia_driver runs the
same script against the real DKMS-built module.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO

LOADER = REPO / "roles" / "nvidia_driver" / "files" / "trainstack-nvidia-flavour"
LICENCES = {"open": "Dual MIT/GPL", "proprietary": "NVIDIA", "none": ""}
H100, B200, V100, T4 = "0x2330", "0x2901", "0x1db1", "0x1eb8"


def _sysfs(root: Path, devices: list[tuple[str, str, str]]) -> Path:
    for index, (vendor, device, pci_class) in enumerate(devices):
        node = root / "sys" / "bus" / "pci" / "devices" / f"0000:{index + 16:02x}:00.0"
        node.mkdir(parents=True)
        (node / "vendor").write_text(vendor + "\n")
        (node / "device").write_text(device + "\n")
        (node / "class").write_text(pci_class + "\n")
    return root / "sys"


def _run(
    tmp: Path,
    gpus: list[str],
    installed: str,
    preferred: str = "open",
    stash: str | None = None,
    extra: list[tuple[str, str, str]] | None = None,
) -> subprocess.CompletedProcess:
    devices = [("0x10de", gpu, "0x030200") for gpu in gpus] + (extra or [])
    sysfs = _sysfs(tmp, devices)
    shim = tmp / "bin"
    shim.mkdir()
    (shim / "modinfo").write_text(
        f"#!/bin/sh\n[ -n '{LICENCES[installed]}' ] && echo '{LICENCES[installed]}'\n"
    )
    (shim / "modinfo").chmod(0o755)
    config = tmp / "flavour.conf"
    config.write_text(f"PREFERRED={preferred}\n")
    modules = tmp / "modules"
    if stash:
        (modules / "6.1.0-test" / f"nvidia-{stash}").mkdir(parents=True)
        for mod in ("nvidia", "nvidia-uvm"):
            (modules / "6.1.0-test" / f"nvidia-{stash}" / f"{mod}.ko").write_bytes(b"\x7fELF")
    args = [
        str(LOADER),
        "--sysfs",
        str(sysfs),
        "--kernel",
        "6.1.0-test",
        "--config",
        str(config),
        "--modules-root",
        str(modules),
        "--run-dir",
        str(tmp / "run"),
    ]
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"}
    return subprocess.run(args, capture_output=True, text=True, env=env, check=False)


def _fields(out: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in out.split() if "=" in item)


@pytest.mark.parametrize(
    ("gpus", "installed", "preferred", "need", "chosen"),
    [
        ([H100] * 8, "open", "open", "any", "open"),
        ([H100] * 8, "proprietary", "proprietary", "any", "proprietary"),
        ([T4], "open", "open", "any", "open"),
        ([V100] * 8, "proprietary", "open", "proprietary", "proprietary"),
        ([B200] * 8, "open", "proprietary", "open", "open"),
    ],
)
def test_installed_flavour_used_when_it_fits(tmp_path, gpus, installed, preferred, need, chosen) -> None:
    proc = _run(tmp_path, gpus, installed, preferred)
    assert proc.returncode == 0, proc.stderr
    fields = _fields(proc.stdout)
    assert (fields["gpus"], fields["need"], fields["chosen"], fields["action"]) == (
        str(len(gpus)),
        need,
        chosen,
        "installed",
    )
    assert not (tmp_path / "run" / "trainstack-nvidia-flavour.conf").exists()


def test_staged_flavour_routed_through_modprobe(tmp_path) -> None:
    proc = _run(tmp_path, [B200] * 8, "proprietary", "proprietary", stash="open")
    assert proc.returncode == 0, proc.stderr
    assert _fields(proc.stdout)["action"] == "staged"
    conf = (tmp_path / "run" / "trainstack-nvidia-flavour.conf").read_text()
    stash = tmp_path / "modules" / "6.1.0-test" / "nvidia-open"
    assert f"install nvidia /sbin/insmod {stash}/nvidia.ko $CMDLINE_OPTS" in conf
    assert f"install nvidia_uvm /sbin/modprobe nvidia && /sbin/insmod {stash}/nvidia-uvm.ko" in conf


def test_missing_flavour_fails_with_reason(tmp_path) -> None:
    proc = _run(tmp_path, [V100] * 8, "open")
    assert proc.returncode == 1
    assert "no proprietary modules for kernel 6.1.0-test" in proc.stderr


def test_pre_turing_and_blackwell_together_refused(tmp_path) -> None:
    proc = _run(tmp_path, [V100, B200], "open")
    assert proc.returncode == 1
    assert "pre-Turing and Blackwell" in proc.stderr


def test_other_devices_ignored(tmp_path) -> None:
    # An NVIDIA audio function (class 0x0403) and another vendor's GPU are not GPUs to drive.
    extra = [("0x10de", "0x22e8", "0x040300"), ("0x1002", "0x740f", "0x038000")]
    proc = _run(tmp_path, [], "none", extra=extra)
    assert proc.returncode == 0
    assert proc.stdout.startswith("gpus=0 ")
