"""roles/lustre_client: the Lustre client's repository and packages on each OS it supports (the role's own
files rendered in process, as a play would: tests/support/roles.py role_templar), and the inputs it
refuses."""

from __future__ import annotations

import pytest

from tests.support import current_stack, input_validation_tests

ROLE = "lustre_client"
STACK = current_stack()
CAPTURE = ["__lustre_client_packages", "__lustre_client_repo", "__lustre_client_supported"]
# (case id, os, variables, fragment the failure message must contain)
BAD_INPUT = [
    (
        "lustre_mount_name",
        "ubuntu2204",
        {
            "lustre_client_mounts": [
                {"dns_name": "fs-1.fsx.us-east-1.amazonaws.com", "mount_name": "a b", "path": "/fsx"}
            ]
        },
        "lustre_client_mounts",
    ),
    ("lustre_debian", "debian12", {"lustre_client_install": True}, "lustre_client_install"),
]
# (case id, os, variables)
GOOD_INPUT = [
    (
        "lustre_ok",
        "al2023",
        {
            "lustre_client_mounts": [
                {"dns_name": "fs-1.fsx.us-east-1.amazonaws.com", "mount_name": "abc12", "path": "/fsx"}
            ]
        },
    )
]


@pytest.mark.parametrize(("os_key", "codename"), [("ubuntu2204", "jammy"), ("ubuntu2404", "noble")])
def test_lustre_client_ubuntu_repository(os_values, os_key, codename):
    values = os_values[os_key]
    assert f"/ubuntu {codename} main" in values["__lustre_client_repo"]
    assert values["__lustre_client_packages"][0] == "lustre-client-modules-6.8.0-1015-aws"


def test_lustre_client_al2023_and_debian(os_values):
    assert os_values["al2023"]["__lustre_client_packages"] == ["lustre-client"]
    debian = os_values["debian12"]
    assert debian["__lustre_client_packages"] == [] and debian["__lustre_client_supported"] is False


test_bad_input_is_refused_naming_the_variable, test_good_input_passes_validation = input_validation_tests(
    ROLE, BAD_INPUT, GOOD_INPUT
)
