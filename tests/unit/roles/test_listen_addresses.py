"""Where exporters and Prometheus listen: the roles' templates and asserts, rendered with Ansible's templar.

roles/monitoring (node_exporter, Prometheus, our Slurm exporter) binds the node's cluster address and our EFA
exporter writes node_exporter's textfile instead of opening a port; roles/dcgm's dcgm-exporter (baked into
images) binds the address its first boot records, loopback until then. No template may produce a wildcard
listener, and the roles refuse one as input. Only files are rendered here; molecule/observability runs them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from tests.support import REPO, trust_role_data

# Several roles' tests in one file: its markers are named here, not taken from its name.
pytestmark = [pytest.mark.validation, pytest.mark.role_monitoring, pytest.mark.role_dcgm]

NODE = "10.0.3.17"
FACTS = {
    "distribution": "Debian",
    "distribution_version": "12.12",
    "distribution_major_version": "12",
    "os_family": "Debian",
    "architecture": "x86_64",
    "default_ipv4": {"address": NODE},
    "all_ipv4_addresses": [NODE, "172.17.0.1"],
}


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) if path.exists() else {}


def templar(role: str, os_vars: str, **overrides: Any) -> Templar:
    """A play's view of one host: role defaults < vars/main.yml < OS vars < inventory/extra vars."""
    root = REPO / "roles" / role
    variables = {
        **trust_role_data(_yaml(root / "defaults" / "main.yml")),
        **trust_role_data(_yaml(root / "vars" / "main.yml")),
        **trust_role_data(_yaml(root / "vars" / f"{os_vars}.yml")),
        "ansible_facts": FACTS,
        "ansible_managed": "managed by a test",
        "inventory_hostname": "gpu1",
        "groups": {"all": ["gpu1", "gpu2"]},
        "hostvars": {"gpu1": {"ansible_host": NODE}, "gpu2": {"ansible_host": "10.0.3.18"}},
        "role_path": str(root),
        **trust_role_data(overrides),
    }
    return Templar(loader=DataLoader(), variables=variables)


def render(templ: Templar, role: str, name: str) -> str:
    return str(templ.template(trust_as_template((REPO / "roles" / role / "templates" / name).read_text())))


def value(templ: Templar, expression: str) -> Any:
    return templ.template(trust_as_template("{{ " + expression + " }}"))


def assert_failure(templ: Templar, role: str, tasks_file: str, task_name: str) -> str | None:
    """Evaluate one assert task of a role as Ansible would: its fail_msg when a condition fails, else None."""
    tasks = _yaml(REPO / "roles" / role / "tasks" / tasks_file)
    task = next(t for t in tasks if t["name"] == task_name)
    scoped = templ.copy_with_new_env(
        available_variables={**templ.available_variables, **trust_role_data(task.get("vars") or {})}
    )
    spec = task["ansible.builtin.assert"]
    if all(scoped.evaluate_conditional(trust_as_template(str(c))) for c in spec["that"]):
        return None
    return str(scoped.template(trust_as_template(spec["fail_msg"])))


WILDCARD = re.compile(r"(^|[\s=])(0\.0\.0\.0|\[::\]|::)?:(9090|9100|9400|9716|9717)\b")


def no_wildcard(text: str) -> bool:
    """No ':PORT', '0.0.0.0:PORT' or '[::]:PORT' listen address (every interface) in a rendered file."""
    return WILDCARD.search(text) is None


# ------------------------------------------------------------------------------------------- monitoring
def test_default_listen_address_is_the_inventory_address_when_it_is_an_ip():
    assert (
        value(templar("monitoring", "debian", ansible_host="10.0.3.99"), "monitoring_listen_address")
        == "10.0.3.99"
    )


def test_default_listen_address_falls_back_to_the_default_route():
    for host in ("gpu1.cluster.internal", None):
        extra = {"ansible_host": host} if host else {}
        assert value(templar("monitoring", "debian", **extra), "monitoring_listen_address") == NODE


def test_node_exporter_and_prometheus_bind_the_cluster_address():
    templ = templar("monitoring", "debian", monitoring_server=True)
    node = render(templ, "monitoring", "node-exporter.default.j2")
    assert f"--web.listen-address={NODE}:9100" in node
    assert "--collector.textfile.directory=/var/lib/prometheus/node-exporter" in node
    prometheus = render(templ, "monitoring", "prometheus.default.j2")
    assert f"--web.listen-address={NODE}:9090" in prometheus
    assert no_wildcard(node) and no_wildcard(prometheus)


def test_slurm_exporter_binds_the_cluster_address():
    templ = templar("monitoring", "debian", monitoring_slurm_exporter=True)
    exporters = value(templ, "__monitoring_exporters")
    (slurm,) = [e for e in exporters if e["name"] == "slurm"]
    unit = render(templar("monitoring", "debian", item=slurm), "monitoring", "exporter.service.j2")
    assert f"--address {NODE} --port 9717" in unit
    assert [e["name"] for e in exporters] == ["slurm"], "the EFA exporter serves no HTTP"


def test_efa_exporter_writes_the_textfile_and_has_no_network():
    unit = render(templar("monitoring", "debian"), "monitoring", "efa-exporter.service.j2")
    assert "--textfile /var/lib/prometheus/node-exporter/efa.prom" in unit
    assert "--port" not in unit and "--address" not in unit
    assert "PrivateNetwork=true" in unit and "ReadWritePaths=/var/lib/prometheus/node-exporter" in unit
    timer = render(templar("monitoring", "debian"), "monitoring", "efa-exporter.timer.j2")
    assert "OnUnitActiveSec=15s" in timer


def test_prometheus_scrapes_the_listen_addresses_and_has_no_efa_job():
    templ = templar(
        "monitoring",
        "debian",
        monitoring_server=True,
        hostvars={"gpu1": {"ansible_host": NODE}, "gpu2": {"ansible_host": "10.0.3.18"}},
    )
    config = yaml.safe_load(render(templ, "monitoring", "prometheus.yml.j2"))
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"prometheus", "node"}
    assert jobs["prometheus"]["static_configs"][0]["targets"] == [f"{NODE}:9090"]
    assert [c["targets"][0] for c in jobs["node"]["static_configs"]] == [f"{NODE}:9100", "10.0.3.18:9100"]


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "", "10.9.9.9", "gpu1"])
def test_monitoring_refuses_a_wildcard_or_foreign_listen_address(address):
    templ = templar("monitoring", "debian", monitoring_listen_address=address)
    message = assert_failure(templ, "monitoring", "main.yml", "Check the listen address")
    assert message is not None and "monitoring_listen_address" in message and "never a wildcard" in message


@pytest.mark.parametrize("address", [NODE, "127.0.0.1"])
def test_monitoring_accepts_an_own_or_loopback_address(address):
    templ = templar("monitoring", "debian", monitoring_listen_address=address)
    assert assert_failure(templ, "monitoring", "main.yml", "Check the listen address") is None


def test_efa_textfile_needs_node_exporter():
    templ = templar("monitoring", "debian", monitoring_node_exporter=False)
    message = assert_failure(templ, "monitoring", "main.yml", "Check the listen address")
    assert message is not None and "monitoring_efa_exporter needs monitoring_node_exporter" in message


# ------------------------------------------------------------------------------------------------ dcgm
def test_dcgm_exporter_binds_the_recorded_cluster_address_or_loopback():
    unit = render(templar("dcgm", "debian-12"), "dcgm", "dcgm-exporter.service.j2")
    assert "--address ${TRAINSTACK_CLUSTER_ADDRESS}:9400" in unit
    # Environment= first (loopback), then the file written at first boot, which overrides it.
    fallback = unit.index("Environment=TRAINSTACK_CLUSTER_ADDRESS=127.0.0.1")
    assert fallback < unit.index("EnvironmentFile=-/etc/trainstack/cluster-address.env")
    assert "trainstack-cluster-address.service" in unit.split("[Service]")[0]
    assert no_wildcard(unit)


def test_dcgm_exporter_binds_a_given_address():
    unit = render(
        templar("dcgm", "debian-12", dcgm_exporter_listen_address=NODE), "dcgm", "dcgm-exporter.service.j2"
    )
    assert f"Environment=TRAINSTACK_CLUSTER_ADDRESS={NODE}" in unit and "EnvironmentFile" not in unit


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "*"])
def test_dcgm_refuses_a_wildcard(address):
    templ = templar("dcgm", "debian-12", dcgm_exporter_listen_address=address, dcgm_version="4.7.0")
    message = assert_failure(templ, "dcgm", "install.yml", "Check the DCGM settings")
    assert message is not None and "dcgm_exporter_listen_address" in message


def test_dcgm_accepts_the_default():
    templ = templar(
        "dcgm", "debian-12", dcgm_version="4.7.0", dcgm_packages=["datacenter-gpu-manager-4-cuda13"]
    )
    assert assert_failure(templ, "dcgm", "install.yml", "Check the DCGM settings") is None


# ------------------------------------------------------------------------------------------------ docs
def test_observability_docs_name_every_port_for_security_groups():
    docs = (REPO / "docs" / "observability.md").read_text()
    section = docs[docs.index("## Ports") :]
    for port in ("9090", "9100", "9400", "9717"):
        assert port in section, port
    assert "9716" not in section, "the EFA exporter opens no port"
