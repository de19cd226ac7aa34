"""roles/nvme_scratch: the instance-store scratch settings on each OS it supports (the role's own files
rendered in process, as a play would: tests/support/roles.py role_templar), and the inputs it refuses."""

from __future__ import annotations

from tests.support import current_stack, input_validation_tests

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


def test_nvme_scratch_discovers_only_outside_containers(os_values):
    settings = os_values["al2023"]["__nvme_scratch_settings"]
    assert settings["discover"] is True and settings["filesystem"] == "xfs"
    assert "mdadm" in os_values["al2023"]["__nvme_scratch_packages"]


test_bad_input_is_refused_naming_the_variable, test_good_input_passes_validation = input_validation_tests(
    ROLE, BAD_INPUT, GOOD_INPUT
)
