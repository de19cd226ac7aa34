"""The node bootstrap (playbooks/files/node_bootstrap.sh) on the lab's three nodes, as ParallelCluster runs
it.

Each node gets the files ParallelCluster writes before its OnNodeConfigured action (dna.json and cfnconfig,
HeadNode on ts-head, ComputeFleet on the two compute nodes), the controller serves the node bundle over HTTP
on the lab bridge, and each node fetches the script and runs it as root. The head node is given its role as an
argument (as pcluster_config renders it); the compute nodes find theirs in dna.json and, on the second,
cfnconfig alone. A second run must change nothing; a wrong sha256 and a missing bundle must fail naming their
step. Everything written on the nodes is removed afterwards, including packages the bootstrap installed.
"""

from __future__ import annotations

import json
import re
import shlex
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.support import (
    lab_node_state,
    lab_ssh,
    on_lab_node,
    playbook,
    restore_lab_node,
    serve_directory,
)

pytestmark = [pytest.mark.lab, pytest.mark.cluster, pytest.mark.slow]

BRIDGE = "10.77.0.1"
PROXY = f"http://{BRIDGE}:3142"
HEAD, COMPUTE1, COMPUTE2 = "10.77.0.11", "10.77.0.12", "10.77.0.13"
CLUSTER = "lab-pc"
# What ParallelCluster writes, per node: (dna.json's node type, None for no dna.json; cfnconfig's node type).
# The second compute node has cfnconfig only: the script's fallback.
PCLUSTER_FILES = {
    HEAD: ("HeadNode", "HeadNode"),
    COMPUTE1: ("ComputeFleet", "ComputeFleet"),
    COMPUTE2: (None, "ComputeFleet"),
}
# The role argument pcluster_config renders; the compute nodes are left to find theirs.
ROLE_ARG = {HEAD: "head", COMPUTE1: "", COMPUTE2: ""}
EXPECTED = {
    HEAD: ("head", ["monitoring", "node_health_hooks"]),
    COMPUTE1: ("compute", ["monitoring", "node_health"]),
    COMPUTE2: ("compute", ["monitoring", "node_health"]),
}
# Paths the bootstrap (and this test) may create; those absent before the test are removed after it.
CREATED_PATHS = [
    "/etc/parallelcluster",
    "/etc/chef",
    "/opt/trainstack",
    "/opt/slurm",
    "/etc/trainstack/node_bootstrap.json",
    "/etc/trainstack/node_health.json",
    "/usr/local/lib/trainstack/node_health",
    "/var/lib/trainstack/node_health",
    "/usr/local/lib/trainstack/monitoring",
    "/etc/systemd/system/trainstack-efa-exporter.service",
    "/etc/systemd/system/trainstack-efa-exporter.timer",
    "/root/node_bootstrap.sh",
]
# Their parents, removed when absent before and empty after.
PARENT_DIRS = ["/etc/trainstack", "/usr/local/lib/trainstack", "/var/lib/trainstack"]
# Packages the bootstrap may install (node_exporter by the monitoring role, python3-venv by the script).
PACKAGES = ("prometheus-node-exporter", "python3-venv", "python3.11-venv")
FETCH = "import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])"
RECAP = re.compile(r"^localhost\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0", re.MULTILINE)


def _pcluster_files_command(address: str) -> str:
    """Shell that writes ParallelCluster's node files the way its cookbook lays them out."""
    dna_type, cfn_type = PCLUSTER_FILES[address]
    cfnconfig = (
        f"stack_name={CLUSTER}\ncfn_region=us-east-1\ncfn_node_type={cfn_type}\ncfn_cluster_user=admin\n"
    )
    commands = [
        "mkdir -p /etc/parallelcluster",
        f"printf %s {shlex.quote(cfnconfig)} > /etc/parallelcluster/cfnconfig",
    ]
    if dna_type:
        dna = {
            "cluster": {
                "node_type": dna_type,
                "cluster_name": CLUSTER,
                "scheduler": "slurm",
                "region": "us-east-1",
            }
        }
        commands += ["mkdir -p /etc/chef", f"printf %s {shlex.quote(json.dumps(dna))} > /etc/chef/dna.json"]
    return " && ".join(commands)


def _bootstrap(address: str, base_url: str, sha256: str, *, bundle: str = "node-bundle.tar.gz") -> Any:
    """Fetch the script from the bundle server and run it as root, as ParallelCluster's custom action does."""
    args = [ROLE_ARG[address]] if ROLE_ARG[address] else []
    args += ["--bundle", f"{base_url}/{bundle}", "--sha256", sha256]
    # Lab nodes have no curl: the script is fetched with Python (ParallelCluster uses its own client).
    command = (
        f"export http_proxy={PROXY} https_proxy={PROXY} no_proxy={BRIDGE},localhost,127.0.0.1; "
        f"python3 -c {shlex.quote(FETCH)} {base_url}/bootstrap.sh /root/node_bootstrap.sh && "
        f"bash /root/node_bootstrap.sh {shlex.join(args)}"
    )
    return lab_ssh(address, command, timeout=900)


def _run_all(base_url: str, sha256: str) -> dict[str, Any]:
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {address: pool.submit(_bootstrap, address, base_url, sha256) for address in PCLUSTER_FILES}
    return {address: future.result() for address, future in futures.items()}


@pytest.fixture(scope="module")
def bundle(lab: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The node bundle built by its playbook, served on the lab bridge: (base URL, sha256)."""
    out = tmp_path_factory.mktemp("node-bundle")
    playbook("node_bundle", "-e", f"node_bundle_dir={out}")
    sha256 = (out / "node-bundle.tar.gz.sha256").read_text().split()[0]
    with serve_directory(out, host=BRIDGE) as (base_url, _requests):
        yield base_url, sha256


@pytest.fixture(scope="module")
def pcluster_nodes(lab: None) -> Iterator[None]:
    """ParallelCluster's files on the three nodes; afterwards every node as it was before."""
    before = {
        address: lab_node_state(address, CREATED_PATHS + PARENT_DIRS, PACKAGES) for address in PCLUSTER_FILES
    }
    try:
        for address in PCLUSTER_FILES:
            on_lab_node(_pcluster_files_command(address), address)
        yield
    finally:
        for address, state in before.items():
            restore_lab_node(address, state, CREATED_PATHS, PARENT_DIRS, PACKAGES)


@pytest.fixture(scope="module")
def first_run(bundle: tuple[str, str], pcluster_nodes: None) -> dict[str, Any]:
    started = time.monotonic()
    results = _run_all(*bundle)
    print(f"first bootstrap of three nodes: {time.monotonic() - started:.0f} s")
    return results


def _record(address: str) -> dict[str, Any]:
    return json.loads(on_lab_node("cat /etc/trainstack/node_bootstrap.json", address))


def test_each_node_gets_the_roles_of_its_type(first_run: dict[str, Any]) -> None:
    for address, proc in first_run.items():
        assert proc.returncode == 0, f"{address}: {proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
        role, applied = EXPECTED[address]
        assert f"[node-type] role {role} (ParallelCluster node type: " in proc.stdout
        assert f"[done] node bootstrap finished for role {role}" in proc.stdout
        record = _record(address)
        assert (record["role"], record["applied"]) == (role, applied), (address, record)
        # No EFA installer and no enroot in the lab image: both skipped, each with its reason.
        assert set(record["skipped"]) == {"efa", "enroot_pyxis"}, record
        assert "efa_installed_packages missing" in record["skipped"]["efa"]
        # node_exporter answers on the node's own address.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://{address}:9100/metrics", timeout=10) as response:
            assert b"\nnode_cpu_seconds_total{" in response.read()


def test_head_node_installs_the_shared_prolog_and_epilog(first_run: dict[str, Any]) -> None:
    assert first_run[HEAD].returncode == 0
    hooks = on_lab_node("ls /opt/slurm/etc/scripts/prolog.d /opt/slurm/etc/scripts/epilog.d", HEAD)
    assert hooks.count("50-trainstack-node-health.sh") == 2
    # Compute nodes get the checks and their configuration; the shared hook directory is the head node's.
    for address in (COMPUTE1, COMPUTE2):
        config = json.loads(on_lab_node("cat /etc/trainstack/node_health.json", address))
        assert config["instance_type"] == "local"
        assert on_lab_node("test -e /opt/slurm && echo yes || echo no", address) == "no"


def test_second_run_changes_nothing(first_run: dict[str, Any], bundle: tuple[str, str]) -> None:
    assert all(proc.returncode == 0 for proc in first_run.values())
    started = time.monotonic()
    second = _run_all(*bundle)
    print(f"second bootstrap of three nodes: {time.monotonic() - started:.0f} s")
    for address, proc in second.items():
        assert proc.returncode == 0, f"{address}: {proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
        assert "already in /opt/trainstack/bootstrap/venv" in proc.stdout
        assert "already installed in /opt/trainstack/bootstrap/collections" in proc.stdout
        changed = RECAP.findall(proc.stdout)
        assert changed == ["0"], f"{address}: {proc.stdout[-3000:]}"


@pytest.mark.parametrize(
    ("sha256", "bundle_name", "line"),
    [
        ("0" * 64, "node-bundle.tar.gz", "trainstack-bootstrap: step verify failed: sha256 of "),
        (None, "no-such-bundle.tar.gz", "trainstack-bootstrap: step fetch failed: download of "),
    ],
    ids=["wrong-sha256", "missing-bundle"],
)
def test_a_broken_step_fails_naming_it(
    first_run: dict[str, Any], bundle: tuple[str, str], sha256: str | None, bundle_name: str, line: str
) -> None:
    base_url, good = bundle
    proc = _bootstrap(COMPUTE2, base_url, sha256 or good, bundle=bundle_name)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(line), proc.stderr
    # Nothing past the failed step ran: the playbook did not start.
    assert "[playbook]" not in proc.stdout
