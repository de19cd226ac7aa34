"""Verifier for roles/monitoring: Prometheus on the node scrapes node_exporter (which serves our EFA
exporter's textfile, from fixture sysfs) and our Slurm exporter, PromQL queries through its HTTP API return
the expected series, and every listener is on the node's cluster address, none on every interface."""

import importlib.util
import json
import shlex
import time
import urllib.parse
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
FIXTURE = REPO / "molecule/observability/files/efa-sysfs/class/infiniband"
DASHBOARDS = sorted((REPO / "roles/monitoring/files/dashboards").glob("*.json"))
_spec = importlib.util.spec_from_file_location("promql", REPO / "tests/unit/validation/promql.py")
promql = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(promql)


FETCH = "python3 -c 'import sys, urllib.request as u; print(u.urlopen(sys.argv[1]).read().decode())' "


# Listening TCP sockets from /proc/net/tcp (state 0A), as address:port (minbase may have no ss).
_LISTENERS_PY = (
    "import socket, struct\n"
    "for row in open('/proc/net/tcp').read().splitlines()[1:]:\n"
    "    local, state = row.split()[1], row.split()[3]\n"
    "    if state == '0A':\n"
    "        address, port = local.split(':')\n"
    "        print(socket.inet_ntoa(struct.pack('<I', int(address, 16))) + ':' + str(int(port, 16)))\n"
)
LISTENERS = "python3 -c " + shlex.quote(_LISTENERS_PY)
PORTS = {"prometheus": 9090, "node": 9100, "slurm": 9717}


def address(host):
    """The node's cluster address: its inventory address, which the role's listen address defaults to."""
    return host.ansible.get_variables()["ansible_host"]


def api(host, path):
    """GET from Prometheus' HTTP API inside the node (the node's own python3; minbase has no curl)."""
    url = f"http://{address(host)}:9090/api/v1/{path}"
    return json.loads(host.check_output(FETCH + "'" + url + "'"))


def query(host, expr):
    answer = api(host, "query?query=" + urllib.parse.quote(expr))
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


@pytest.fixture(scope="module")
def scraped(host):
    """Wait (at most 60 s) until every target has been scraped and is up."""
    deadline = time.monotonic() + 60
    while True:
        up = {r["metric"]["job"]: r["value"][1] for r in query(host, "up")}
        if {"node", "slurm", "prometheus"} <= set(up) and set(up.values()) == {"1"}:
            return up
        assert time.monotonic() < deadline, f"targets not all up after 60 s: {up}"
        time.sleep(2)


@pytest.mark.parametrize(
    "unit",
    ["prometheus", "prometheus-node-exporter", "trainstack-efa-exporter.timer", "trainstack-slurm-exporter"],
)
def test_services_running(host, unit):
    assert host.service(unit).is_running and host.service(unit).is_enabled


def test_every_target_up(scraped):
    """No efa job: its counters come with node_exporter's (textfile collector)."""
    assert scraped == {"node": "1", "slurm": "1", "prometheus": "1"}


def test_listeners_are_on_the_cluster_address_only(host):
    listening = set(host.check_output(LISTENERS).split())
    for name, port in PORTS.items():
        assert f"{address(host)}:{port}" in listening, name
        assert f"0.0.0.0:{port}" not in listening, f"{name} listens on every interface"
    assert not [entry for entry in listening if entry.endswith(":9716")], "the EFA exporter opens no port"


def test_efa_textfile_is_written_for_node_exporter(host):
    textfile = host.file("/var/lib/prometheus/node-exporter/efa.prom")
    assert textfile.exists and "efa_devices 2" in textfile.content_string.splitlines()


@pytest.mark.parametrize("counter", ["rx_bytes", "tx_bytes", "rdma_read_bytes", "retrans_pkts"])
def test_efa_counters_match_the_fixture(host, scraped, counter):
    series = query(host, f"efa_{counter}_total")
    got = {(s["metric"]["device"], s["metric"]["node"]): int(s["value"][1]) for s in series}
    want = {
        (dev.name, "ts-m-observability"): int((dev / "ports/1/hw_counters" / counter).read_text())
        for dev in FIXTURE.iterdir()
    }
    assert got == want


def test_efa_device_count(host, scraped):
    assert [s["value"][1] for s in query(host, "efa_devices")] == ["2"]


def test_node_exporter_series(host, scraped):
    series = query(host, 'node_memory_MemTotal_bytes{job="node"}')
    assert len(series) == 1 and int(series[0]["value"][1]) > 0


def test_slurm_exporter_reports_no_slurm_here(host, scraped):
    assert [s["value"][1] for s in query(host, "slurm_up")] == ["0"]


def test_dashboard_metrics_exist_in_prometheus(host, scraped):
    """Every metric the node and EFA dashboards query is one these exporters really expose."""
    names = set(query_names(host))
    for path in DASHBOARDS:
        if path.stem not in ("trainstack-node", "trainstack-efa"):
            continue
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel["targets"]:
                missing = promql.metric_names(target["expr"]) - names
                assert not missing, f"{path.name} panel {panel['id']}: {missing}"


def query_names(host):
    return api(host, "label/__name__/values")["data"]
