"""roles/nvme_scratch on every OS it supports: the instance-store scratch settings, and the inputs it refuses.

Only Debian 12 runs for real here, so the Ubuntu and Amazon Linux paths are covered by the values the role
resolves for them, rendered with Ansible's templar from the role's own files (tests/support.py: role_templar).
"""

from __future__ import annotations

import pytest

from tests.support import OS_FACTS, current_stack, resolve_role_vars, role_validation_failure

ROLE = "nvme_scratch"
STACK = current_stack()
CAPTURE = ["__nvme_scratch_packages", "__nvme_scratch_settings"]
# (case id, os, variables, fragment the failure message must contain)
BAD_INPUT = [
    ("scratch_fs", "ubuntu2204", {"nvme_scratch_filesystem": "btrfs"}, "nvme_scratch_filesystem"),
    ("scratch_root", "ubuntu2204", {"nvme_scratch_mount_point": "/"}, "nvme_scratch_mount_point"),
]
# (case id, os, variables)
GOOD_INPUT = [("scratch_ok", "al2023", {"nvme_scratch_devices": ["/dev/nvme1n1", "/dev/nvme2n1"]})]


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    """Every OS's resolved values of CAPTURE."""
    return {os_key: resolve_role_vars(ROLE, os_key, CAPTURE) for os_key in OS_FACTS}


def test_nvme_scratch_discovers_only_outside_containers(results):
    settings = results["al2023"]["__nvme_scratch_settings"]
    assert settings["discover"] is True and settings["filesystem"] == "xfs"
    assert "mdadm" in results["al2023"]["__nvme_scratch_packages"]


@pytest.mark.parametrize(
    ("os_key", "variables", "fragment"), [c[1:] for c in BAD_INPUT], ids=[c[0] for c in BAD_INPUT]
)
def test_bad_input_is_refused_naming_the_variable(os_key, variables, fragment):
    message = role_validation_failure(ROLE, os_key, variables)
    assert message is not None and fragment in message


@pytest.mark.parametrize(("os_key", "variables"), [c[1:] for c in GOOD_INPUT], ids=[c[0] for c in GOOD_INPUT])
def test_good_input_passes_validation(os_key, variables):
    assert role_validation_failure(ROLE, os_key, variables) is None
