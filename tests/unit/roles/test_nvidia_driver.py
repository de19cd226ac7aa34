"""roles/nvidia_driver on every OS it supports: the driver version, source, packages and fabric manager each
OS resolves (the shared playbook run of the NVIDIA roles: the fixture nvidia_resolved), and the inputs it
refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import case_params, current_stack, nvidia_role_refusal

ROLE = "nvidia_driver"
STACK = current_stack()["components"]


# (case id, entry point, variables, text the error must contain)
BAD_INPUT = [
    (
        "proprietary_modules_on_blackwell",
        "validate",
        {
            "nvidia_driver_version": "595.91.07",
            "nvidia_driver_kernel_modules": "proprietary",
            "nvidia_driver_instance_family": "p6-b200",
        },
        "nvidia_driver_kernel_modules=proprietary",
    ),
    (
        "open_modules_before_turing",
        "validate",
        {
            "nvidia_driver_version": "535.261.03",
            "nvidia_driver_kernel_modules": "open",
            "nvidia_driver_instance_family": "p3",
        },
        "open modules need Turing",
    ),
    ("a_version_word", "validate", {"nvidia_driver_version": "latest"}, "nvidia_driver_version (latest)"),
]


@pytest.mark.parametrize(("entry", "extra", "message"), case_params(BAD_INPUT))
def test_bad_input_fails_naming_the_variable(tmp_path: Path, entry: str, extra: dict, message: str) -> None:
    proc = nvidia_role_refusal(tmp_path, ROLE, entry, extra)
    assert proc.returncode != 0 and message in proc.stdout


def test_driver_defaults_follow_the_stack(nvidia_resolved: dict) -> None:
    pin = STACK["nvidia_driver"]["version"]
    assert [nvidia_resolved[h]["driver_version"] for h in ("ubuntu2204", "ubuntu2404", "amzn2023")] == [
        pin
    ] * 3
    # The stack pins no driver for the Debian lab image: the role skips there.
    assert nvidia_resolved["debian12"]["driver_version"] == ""


def test_driver_sources_and_packages_per_os(nvidia_resolved: dict) -> None:
    branch = STACK["nvidia_driver"]["version"].split(".")[0]
    assert nvidia_resolved["ubuntu2404"]["driver_source"] == "nvidia_repo"
    assert nvidia_resolved["ubuntu2404"]["driver_packages"] == [f"nvidia-open-{branch}"]
    assert nvidia_resolved["debian12"]["driver_source"] == "distribution"
    amzn = nvidia_resolved["amzn2023"]
    assert amzn["driver_packages"][0] == f"kmod-nvidia-open-dkms-{STACK['nvidia_driver']['version']}"
    assert (amzn["driver_hold"], amzn["driver_headers"]) == ("versionlock", "kernel-devel-{kernel}")
    assert nvidia_resolved["ubuntu2204"]["driver_headers"] == "linux-headers-{kernel}"


def test_fabric_manager_only_for_nvswitch_families(nvidia_resolved: dict) -> None:
    # p6-b200 (NVLink 5): fabric manager and nvlsm; p5: fabric manager; g6e: neither.
    assert (
        nvidia_resolved["ubuntu2204"]["driver_fabricmanager"],
        nvidia_resolved["ubuntu2204"]["driver_nvlsm"],
    ) == (
        True,
        True,
    )
    assert (
        nvidia_resolved["ubuntu2404"]["driver_fabricmanager"],
        nvidia_resolved["ubuntu2404"]["driver_nvlsm"],
    ) == (
        True,
        False,
    )
    assert (
        nvidia_resolved["amzn2023"]["driver_fabricmanager"],
        nvidia_resolved["amzn2023"]["driver_nvlsm"],
    ) == (
        False,
        False,
    )
