"""roles/dcgm: dcgm-exporter (baked into images) binds the address its first boot records, loopback until
then, or the one given, never a wildcard, and the role refuses a wildcard as input. The role's unit template
and asserts are rendered with Ansible's templar; molecule/nvidia_userspace runs them. The version spec each
OS resolves comes from the NVIDIA roles' shared playbook run (the fixture nvidia_resolved).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.template import Templar

from tests.support import (
    CLUSTER_NODE,
    CLUSTER_NODE_VARS,
    assert_task_failure,
    case_params,
    current_stack,
    no_wildcard_listener,
    nvidia_role_refusal,
    render_role_template,
    role_data_templar,
    role_task,
)

ROLE = "dcgm"
STACK = current_stack()["components"]


def templar(**overrides: object) -> Templar:
    """Node gpu1 of a two-node cluster on Debian 12, with the case's variables."""
    return role_data_templar(ROLE, os_vars="debian-12", **{**CLUSTER_NODE_VARS, **overrides})


def test_dcgm_exporter_binds_the_recorded_cluster_address_or_loopback():
    unit = render_role_template(templar(), ROLE, "dcgm-exporter.service.j2")
    assert "--address ${TRAINSTACK_CLUSTER_ADDRESS}:9400" in unit
    # Environment= first (loopback), then the file written at first boot, which overrides it.
    fallback = unit.index("Environment=TRAINSTACK_CLUSTER_ADDRESS=127.0.0.1")
    assert fallback < unit.index("EnvironmentFile=-/etc/trainstack/cluster-address.env")
    assert "trainstack-cluster-address.service" in unit.split("[Service]")[0]
    assert no_wildcard_listener(unit)


def test_dcgm_exporter_binds_a_given_address():
    unit = render_role_template(
        templar(dcgm_exporter_listen_address=CLUSTER_NODE), ROLE, "dcgm-exporter.service.j2"
    )
    assert f"Environment=TRAINSTACK_CLUSTER_ADDRESS={CLUSTER_NODE}" in unit and "EnvironmentFile" not in unit


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "*"])
def test_dcgm_refuses_a_wildcard(address):
    templ = templar(dcgm_exporter_listen_address=address, dcgm_version="4.7.0")
    message = assert_task_failure(templ, role_task(ROLE, "install.yml", "Check the DCGM settings"))
    assert message is not None and "dcgm_exporter_listen_address" in message


def test_dcgm_accepts_the_default():
    templ = templar(dcgm_version="4.7.0", dcgm_packages=["datacenter-gpu-manager-4-cuda13"])
    assert assert_task_failure(templ, role_task(ROLE, "install.yml", "Check the DCGM settings")) is None


# ------------------------------------------------------------------ per OS, bad input
def test_dcgm_version_spec_per_os(nvidia_resolved: dict) -> None:
    assert (nvidia_resolved["ubuntu2204"]["dcgm_spec"], nvidia_resolved["amzn2023"]["dcgm_spec"]) == (
        "=1:{version}-*",
        "-{version}",
    )
    assert nvidia_resolved["ubuntu2404"]["dcgm_version"] == STACK["dcgm"]["version"]


# (case id, entry point, variables, text the error must contain)
BAD_INPUT = [
    ("unsupported_exporter_port", "main", {"dcgm_exporter_port": 5555}, "dcgm_exporter_port (5555)"),
]


@pytest.mark.parametrize(("entry", "extra", "message"), case_params(BAD_INPUT))
def test_bad_input_fails_naming_the_variable(tmp_path: Path, entry: str, extra: dict, message: str) -> None:
    proc = nvidia_role_refusal(tmp_path, ROLE, entry, extra)
    assert proc.returncode != 0 and message in proc.stdout
