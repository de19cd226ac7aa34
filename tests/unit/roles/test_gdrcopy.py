"""roles/gdrcopy on every OS it supports: the GDRCopy version and kernel headers each OS resolves.

Only Debian 12 runs in the lab; the Ubuntu 22.04/24.04 and Amazon Linux 2023 paths are checked here from the
role's real vars files and the real stack (the fixture nvidia_resolved: one ansible-playbook run for the
NVIDIA roles, tests/support/nvidia.py).
"""

from __future__ import annotations

from tests.support import current_stack

ROLE = "gdrcopy"
STACK = current_stack()["components"]


def test_gdrcopy_version_and_kernel_headers_per_os(nvidia_resolved: dict) -> None:
    assert nvidia_resolved["amzn2023"]["gdrcopy_headers"] == "kernel-devel-{kernel}"
    assert nvidia_resolved["ubuntu2204"]["gdrcopy_version"] == STACK["gdrcopy"]["version"]
