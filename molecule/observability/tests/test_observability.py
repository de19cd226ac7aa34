"""Verifier for roles/monitoring: Prometheus on the node scrapes node_exporter, our EFA exporter (fixture
sysfs) and our Slurm exporter, and PromQL queries through its HTTP API return the expected series."""

import importlib.util
import json
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


def api(host, path):
    """GET from Prometheus' HTTP API inside the node (the node's own python3; minbase has no curl)."""
    return json.loads(host.check_output(FETCH + "'http://127.0.0.1:9090/api/v1/" + path + "'"))


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
        if {"node", "efa", "slurm", "prometheus"} <= set(up) and set(up.values()) == {"1"}:
            return up
        assert time.monotonic() < deadline, f"targets not all up after 60 s: {up}"
        time.sleep(2)


@pytest.mark.parametrize(
    "unit", ["prometheus", "prometheus-node-exporter", "trainstack-efa-exporter", "trainstack-slurm-exporter"]
)
def test_services_running(host, unit):
    assert host.service(unit).is_running and host.service(unit).is_enabled


def test_every_target_up(scraped):
    assert scraped == {"node": "1", "efa": "1", "slurm": "1", "prometheus": "1"}


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
