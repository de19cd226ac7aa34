"""Our exporters (EFA from a fixture sysfs tree, Slurm from captured sinfo/squeue output) and the Grafana
dashboards, checked against Grafana's dashboard JSON model and the metric names the exporters expose."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from .conftest import FIXTURES, ROOT, load
from .promql import metric_names

efa = load(ROOT / "roles/monitoring/files/efa_exporter.py", "trainstack_efa_exporter")
slurm = load(ROOT / "roles/monitoring/files/slurm_exporter.py", "trainstack_slurm_exporter")
SYSFS = ROOT / "molecule/observability/files/efa-sysfs"
DASHBOARDS = sorted((ROOT / "roles/monitoring/files/dashboards").glob("*.json"))
SAMPLE = re.compile(
    r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*",?)*\})? -?[0-9.e+]+$'
)


def exposition_ok(text: str) -> list[str]:
    """Lines that break the Prometheus text format (HELP/TYPE comments or `name{labels} value`)."""
    return [line for line in text.splitlines() if not (line.startswith("# ") or SAMPLE.match(line))]


def names_in(text: str) -> set[str]:
    return {line.split("{")[0].split()[0] for line in text.splitlines() if line and not line.startswith("#")}


# ------------------------------------------------------------------------------------------- EFA
def test_efa_render_matches_the_fixture():
    text = efa.render(SYSFS)
    assert exposition_ok(text) == []
    assert "efa_devices 2" in text.splitlines()
    rx = (SYSFS / "class/infiniband/rdmap32s27/ports/1/hw_counters/rx_bytes").read_text().strip()
    assert f'efa_rx_bytes_total{{device="rdmap32s27",port="1"}} {rx}' in text
    assert "# TYPE efa_rx_bytes_total counter" in text
    assert "# TYPE efa_lifespan gauge" in text and "efa_lifespan_total" not in text


def test_efa_without_devices_reports_zero(tmp_path):
    assert efa.render(tmp_path).splitlines()[-1] == "efa_devices 0"


def test_efa_skips_unreadable_entries(tmp_path):
    counters = tmp_path / "class/infiniband/rdmap0s6/ports/1/hw_counters"
    counters.mkdir(parents=True)
    (counters / "tx_bytes").write_text("12\n")
    (counters / "garbage").write_text("n/a\n")
    (counters / "subdir").mkdir()
    samples = [line for line in efa.render(tmp_path).splitlines() if not line.startswith("#")]
    assert samples == ["efa_devices 1", 'efa_tx_bytes_total{device="rdmap0s6",port="1"} 12']


def test_efa_textfile_is_replaced_atomically(tmp_path):
    target = tmp_path / "efa.prom"
    target.write_text("old\n")
    efa.write_textfile(SYSFS, target)
    assert target.read_text() == efa.render(SYSFS)
    assert [p.name for p in tmp_path.iterdir()] == ["efa.prom"]


def test_efa_http_exporter_serves_metrics():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    script = ROOT / "roles/monitoring/files/efa_exporter.py"
    proc = subprocess.Popen([sys.executable, str(script), "--sysfs", str(SYSFS), "--address", "127.0.0.1",
                             "--port", str(port)])  # fmt: skip
    try:
        for _ in range(50):
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                break
            except OSError:
                time.sleep(0.1)
        assert body == efa.render(SYSFS)
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/nope", timeout=2)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# ------------------------------------------------------------------------------------------- Slurm
def slurm_text(sinfo: str, squeue: str) -> str:
    return "\n".join(slurm.render_nodes(sinfo) + slurm.render_jobs(squeue)) + "\n"


def test_slurm_render_of_the_lab_capture():
    text = slurm_text((FIXTURES / "sinfo-lab.txt").read_text(), (FIXTURES / "squeue-lab.txt").read_text())
    assert exposition_ok(text) == []
    assert 'slurm_nodes{state="mixed"} 2' in text
    assert 'slurm_jobs{state="RUNNING",partition="compute"} 1' in text
    assert 'slurm_running_job_nodes{partition="compute"} 2' in text


def test_slurm_drained_reason_and_gpus():
    sinfo = 'gpu1|drained|p5|node_health: gpu_xid "79"\ngpu2|allocated|p5|none\ngpu2|allocated|debug|none\n'
    squeue = "RUNNING|p5|4|gres/gpu:8\nRUNNING|p5|1|gres:gpu:h100:2\nPENDING|p5|16|gres/gpu:8\n"
    text = slurm_text(sinfo, squeue)
    assert exposition_ok(text) == []
    assert 'slurm_node_state{node="gpu1",state="drained",reason="node_health: gpu_xid \\"79\\""} 1' in text
    assert 'slurm_nodes{state="allocated"} 1' in text  # a node in two partitions counts once
    assert 'slurm_running_job_gpus{partition="p5"} 34' in text
    assert 'slurm_jobs{state="PENDING",partition="p5"} 1' in text


# ------------------------------------------------------------------------------------------- dashboards
def known_metrics() -> set[str]:
    listed = set()
    for name in ("node_exporter-1.5-metric-names.txt", "dcgm-exporter-metric-names.txt"):
        listed |= {
            line for line in (FIXTURES / name).read_text().splitlines() if line and not line.startswith("#")
        }
    sinfo, squeue = (FIXTURES / "sinfo-lab.txt").read_text(), "RUNNING|p|1|gres/gpu:8\n"
    return listed | names_in(efa.render(SYSFS)) | names_in(slurm_text(sinfo, squeue)) | {"up", "slurm_up"}


@pytest.fixture(scope="module", params=DASHBOARDS, ids=[p.stem for p in DASHBOARDS])
def dashboard(request):
    return json.loads(request.param.read_text())


def test_dashboards_exist():
    assert {p.stem for p in DASHBOARDS} == {
        "trainstack-gpu",
        "trainstack-efa",
        "trainstack-slurm",
        "trainstack-node",
    }
    uids = [json.loads(p.read_text())["uid"] for p in DASHBOARDS]
    assert len(set(uids)) == len(uids)


def test_dashboard_model(dashboard):
    for key in ("uid", "title", "panels", "schemaVersion", "templating", "time", "annotations"):
        assert key in dashboard, key
    assert 0 < len(dashboard["uid"]) <= 40 and re.fullmatch(r"[a-zA-Z0-9_-]+", dashboard["uid"])
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), f"duplicate panel ids {ids}"


def test_panels_reference_the_datasource_variable(dashboard):
    for panel in dashboard["panels"]:
        assert panel["type"] in {"timeseries", "stat", "table", "gauge", "bargauge", "text"}
        grid = panel["gridPos"]
        assert all(isinstance(grid[k], int) for k in "hwxy") and grid["x"] + grid["w"] <= 24, panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs))
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]


def test_panels_query_metrics_that_exist(dashboard):
    known = known_metrics()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, f"{panel['title']}: no metric in {target['expr']}"
            assert names <= known, f"{dashboard['uid']} / {panel['title']}: unknown {names - known}"
    node_query = next(v for v in dashboard["templating"]["list"] if v["name"] == "node")["definition"]
    assert metric_names(node_query.replace("label_values(", "").rsplit(",", 1)[0]) <= known


# ------------------------------------------------------------------------------------------- promql helper
@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (node) (rate(efa_rx_bytes_total{node=~"$node"}[$__rate_interval]))', {"efa_rx_bytes_total"}),
        (
            "node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes",
            {"node_memory_MemAvailable_bytes", "node_memory_MemTotal_bytes"},
        ),
        ('1 - avg by (node) (rate(node_cpu_seconds_total{mode="idle"}[5m]))', {"node_cpu_seconds_total"}),
        ('slurm_node_state{state=~"drain.*|down.*"}', {"slurm_node_state"}),
        ("up", {"up"}),
    ],
)
def test_metric_names(expr, names):
    assert metric_names(expr) == names
