"""roles/monitoring: the settings each OS resolves, where node_exporter, Prometheus and our exporters listen,
and the inputs it refuses; the role's templates and asserts rendered with Ansible's templar.

Only Debian 12 runs here, so the Ubuntu and Amazon Linux vars files are checked for what they resolve.
node_exporter, Prometheus and our Slurm exporter bind the node's cluster address, and our EFA exporter writes
node_exporter's textfile instead of opening a port: no template may produce a wildcard listener, and the role
refuses one as input. Only files are rendered here; molecule/observability runs them.
"""

from __future__ import annotations

import pytest
import yaml
from ansible.template import Templar

from tests.support import (
    CLUSTER_NODE,
    CLUSTER_NODE_VARS,
    REPO,
    assert_task_failure,
    no_wildcard_listener,
    render_role_template,
    role_data_templar,
    role_task,
    template_value,
)

ROLE = "monitoring"
VARS = REPO / "roles/monitoring/vars"


def templar(**overrides: object) -> Templar:
    """Node gpu1 of a two-node cluster on Debian, with the case's variables."""
    return role_data_templar(ROLE, os_vars="debian", **{**CLUSTER_NODE_VARS, **overrides})


def load(name):
    return yaml.safe_load((VARS / f"{name}.yml").read_text())


def test_every_os_file_defines_the_same_keys():
    keys = set(load("debian"))
    for name in ("ubuntu", "amazon"):
        assert set(load(name)) == keys, name


def test_debian_and_ubuntu_install_distribution_packages():
    for name in ("debian", "ubuntu"):
        values = load(name)
        assert values["__monitoring_supported"] is True
        assert values["__monitoring_server_packages"] == ["prometheus"]
        assert values["__monitoring_node_packages"] == ["prometheus-node-exporter"]
        assert values["__monitoring_node_exporter_service"] == "prometheus-node-exporter"


def test_amazon_linux_is_refused_before_any_change():
    values = load("amazon")
    assert values["__monitoring_supported"] is False and values["__monitoring_server_packages"] == []
    main = yaml.safe_load((REPO / "roles/monitoring/tasks/main.yml").read_text())
    check = next(task for task in main if task["name"] == "Check the inputs")
    assert "__monitoring_supported" in check["ansible.builtin.assert"]["that"]
    assert main.index(check) < next(i for i, t in enumerate(main) if "import_tasks" in str(t))


# --------------------------------------------------------------------------------------- listen addresses
def test_default_listen_address_is_the_inventory_address_when_it_is_an_ip():
    assert template_value(templar(ansible_host="10.0.3.99"), "monitoring_listen_address") == "10.0.3.99"


def test_default_listen_address_falls_back_to_the_default_route():
    for host in ("gpu1.cluster.internal", None):
        extra = {"ansible_host": host} if host else {}
        assert template_value(templar(**extra), "monitoring_listen_address") == CLUSTER_NODE


def test_node_exporter_and_prometheus_bind_the_cluster_address():
    templ = templar(monitoring_server=True)
    node = render_role_template(templ, ROLE, "node-exporter.default.j2")
    assert f"--web.listen-address={CLUSTER_NODE}:9100" in node
    assert "--collector.textfile.directory=/var/lib/prometheus/node-exporter" in node
    prometheus = render_role_template(templ, ROLE, "prometheus.default.j2")
    assert f"--web.listen-address={CLUSTER_NODE}:9090" in prometheus
    assert no_wildcard_listener(node) and no_wildcard_listener(prometheus)


def test_slurm_exporter_binds_the_cluster_address():
    templ = templar(monitoring_slurm_exporter=True)
    exporters = template_value(templ, "__monitoring_exporters")
    (slurm,) = [e for e in exporters if e["name"] == "slurm"]
    unit = render_role_template(templar(item=slurm), ROLE, "exporter.service.j2")
    assert f"--address {CLUSTER_NODE} --port 9717" in unit
    assert [e["name"] for e in exporters] == ["slurm"], "the EFA exporter serves no HTTP"


def test_efa_exporter_writes_the_textfile_and_has_no_network():
    unit = render_role_template(templar(), ROLE, "efa-exporter.service.j2")
    assert "--textfile /var/lib/prometheus/node-exporter/efa.prom" in unit
    assert "--port" not in unit and "--address" not in unit
    assert "PrivateNetwork=true" in unit and "ReadWritePaths=/var/lib/prometheus/node-exporter" in unit
    timer = render_role_template(templar(), ROLE, "efa-exporter.timer.j2")
    assert "OnUnitActiveSec=15s" in timer


def test_prometheus_scrapes_the_listen_addresses_and_has_no_efa_job():
    templ = templar(
        monitoring_server=True,
        hostvars={"gpu1": {"ansible_host": CLUSTER_NODE}, "gpu2": {"ansible_host": "10.0.3.18"}},
    )
    config = yaml.safe_load(render_role_template(templ, ROLE, "prometheus.yml.j2"))
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"prometheus", "node"}
    assert jobs["prometheus"]["static_configs"][0]["targets"] == [f"{CLUSTER_NODE}:9090"]
    assert [c["targets"][0] for c in jobs["node"]["static_configs"]] == [
        f"{CLUSTER_NODE}:9100",
        "10.0.3.18:9100",
    ]


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "", "10.9.9.9", "gpu1"])
def test_monitoring_refuses_a_wildcard_or_foreign_listen_address(address):
    templ = templar(monitoring_listen_address=address)
    message = assert_task_failure(templ, role_task(ROLE, "main.yml", "Check the listen address"))
    assert message is not None and "monitoring_listen_address" in message and "never a wildcard" in message


@pytest.mark.parametrize("address", [CLUSTER_NODE, "127.0.0.1"])
def test_monitoring_accepts_an_own_or_loopback_address(address):
    templ = templar(monitoring_listen_address=address)
    assert assert_task_failure(templ, role_task(ROLE, "main.yml", "Check the listen address")) is None


def test_efa_textfile_needs_node_exporter():
    templ = templar(monitoring_node_exporter=False)
    message = assert_task_failure(templ, role_task(ROLE, "main.yml", "Check the listen address"))
    assert message is not None and "monitoring_efa_exporter needs monitoring_node_exporter" in message


# The retention and the textfile directory are written into the services' ARGS lines in /etc/default.
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("monitoring_retention", '15d" --web.enable-admin-api "'),
        ("monitoring_retention", "15 days"),
        ("monitoring_textfile_dir", "/var/lib/node exporter"),
        ("monitoring_textfile_dir", "relative/dir"),
        ("monitoring_textfile_dir", '/tmp/x"; touch /tmp/pwned; "'),
    ],
)
def test_monitoring_refuses_values_that_would_break_its_command_lines(key, value):
    templ = templar(monitoring_targets_group="all", **{key: value})
    message = assert_task_failure(templ, role_task(ROLE, "main.yml", "Check the inputs"))
    assert message is not None and f"{key}={value} must be" in message


@pytest.mark.parametrize(("retention", "textfile"), [("15d", "/var/lib/x"), ("1y2w", "/srv/node-exporter.d")])
def test_monitoring_accepts_durations_and_plain_paths(retention, textfile):
    templ = templar(
        monitoring_targets_group="all", monitoring_retention=retention, monitoring_textfile_dir=textfile
    )
    assert assert_task_failure(templ, role_task(ROLE, "main.yml", "Check the inputs")) is None


def test_observability_docs_name_every_port_for_security_groups():
    docs = (REPO / "docs" / "observability.md").read_text()
    section = docs[docs.index("## Ports") :]
    for port in ("9090", "9100", "9400", "9717"):
        assert port in section, port
    assert "9716" not in section, "the EFA exporter opens no port"
