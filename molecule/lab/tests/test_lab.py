"""Verifier for roles/lab: the second lab's nodes boot systemd and answer over SSH on their addresses with
the lab's own key, reach their own package proxy, and the status entry point reports them; then the down
entry point leaves nothing of this lab (containers, bridge, proxy, state, keys, run files, inventory), and
the main lab (bridge tslab0, its nodes, its proxy) is as create found it. Tests run in file order.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
LAB_KEYS = (
    "lab_name",
    "lab_node_count",
    "lab_bridge",
    "lab_subnet_prefix",
    "lab_bridge_address",
    "lab_first_node_octet",
    "lab_state_dir",
    "lab_shared_dir",
    "lab_run_dir",
    "lab_proxy_cache_dir",
    "lab_inventory_file",
)
# The main lab, which this scenario must never touch.
MAIN = {"lab_name": "ts", "lab_bridge": "tslab0", "lab_state_dir": "/var/lib/trainstack/lab"}


@pytest.fixture(scope="module")
def lab(host) -> dict[str, Any]:
    """The second lab's settings, as the scenario's inventory gives them to the role."""
    found = host.ansible.get_variables()
    settings = {k: found[k] for k in LAB_KEYS}
    # Guard before any down: these settings must name a lab other than the main one.
    assert all(settings[k] != v for k, v in MAIN.items()), settings
    assert settings["lab_subnet_prefix"] != "10.77.0"
    return settings


@pytest.fixture(scope="module")
def nodes(lab) -> dict[str, str]:
    """Node name -> address, from the inventory the lab wrote."""
    inventory = yaml.safe_load(Path(lab["lab_inventory_file"]).read_text())
    groups = inventory["all"]["children"]["lab"]["children"]
    return {
        name: host["ansible_host"]
        for group in ("head", "compute")
        for name, host in groups[group]["hosts"].items()
    }


@pytest.fixture(scope="module")
def main_lab() -> dict[str, Any]:
    """The main lab as create found it; skip its checks on a host where it is not up."""
    record = json.loads((EPHEMERAL / "main-lab.json").read_text())
    if not record["layout"] or not record["bridge_address"]:
        pytest.skip("the main lab was not up when the scenario started: nothing to leave alone")
    return record


def ssh(lab: dict[str, Any], address: str, command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            "ssh",
            "-i",
            f"{lab['lab_state_dir']}/ssh/id_ed25519",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "ConnectTimeout=10",
            f"root@{address}",
            command,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def playbook(name: str, lab: dict[str, Any]) -> dict[str, Any]:
    """A lab entry point as a user runs it (its playbook), with this lab's settings; the JSON report."""
    env = {**os.environ, "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"}
    done = subprocess.run(
        ["ansible-playbook", f"trainstack.cluster.{name}", "-e", json.dumps(lab)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return json.loads(done.stdout)


def task_results(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each task's result by its name (without the role's prefix)."""
    return {
        task["task"]["name"].split(" : ")[-1]: outcome
        for play in report["plays"]
        for task in play["tasks"]
        for outcome in task["hosts"].values()
    }


def test_inventory_names_the_nodes(lab, nodes):
    prefix, first = lab["lab_subnet_prefix"], lab["lab_first_node_octet"]
    assert nodes == {"tsm-head": f"{prefix}.{first}", "tsm-compute1": f"{prefix}.{first + 1}"}
    inventory = yaml.safe_load(Path(lab["lab_inventory_file"]).read_text())
    assert (
        inventory["all"]["vars"]["ansible_ssh_private_key_file"] == f"{lab['lab_state_dir']}/ssh/id_ed25519"
    )
    proxy = f"http://{lab['lab_bridge_address']}:3142"
    assert inventory["all"]["vars"]["trainstack_proxy_env"] == {
        "http_proxy": proxy,
        "https_proxy": proxy,
        "no_proxy": f"{lab['lab_bridge_address']},localhost,127.0.0.1",
    }


def test_bridge_is_the_labs_own(host, lab):
    bridge = host.interface(lab["lab_bridge"])
    assert bridge.exists and f"{lab['lab_bridge_address']}" in bridge.addresses
    # Each node's host end of its veth pair is on this bridge.
    ports = host.check_output(f"ls /sys/class/net/{lab['lab_bridge']}/brif").split()
    assert len(ports) == lab["lab_node_count"]


def test_nodes_run_systemd_and_answer_over_ssh(host, lab, nodes):
    for name, address in nodes.items():
        assert host.check_output(f"lxc-info -n {name} -sH") == "RUNNING", name
        done = ssh(lab, address, "hostname; systemctl is-system-running; ip -4 -o addr show dev eth0")
        assert done.returncode == 0, (name, done.stderr)
        hostname, state, addresses = done.stdout.splitlines()
        assert (hostname, state) == (name, "running")
        assert f" {address}/24 " in addresses


def test_nodes_reach_each_other_and_their_own_proxy(lab, nodes):
    head, compute = nodes["tsm-head"], nodes["tsm-compute1"]
    assert ssh(lab, head, "ping -c1 -W3 tsm-compute1").returncode == 0
    # apt in the nodes goes to this lab's proxy, which answers there (apt-cacher-ng's own page).
    probe = (
        "grep -h Proxy /etc/apt/apt.conf.d/01trainstack-proxy; "
        f"exec 3<>/dev/tcp/{lab['lab_bridge_address']}/3142; printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3; "
        "grep -o 'Apt-Cacher NG' <&3 | head -1"
    )
    done = ssh(lab, compute, f"bash -c {shlex.quote(probe)}")
    proxy = f"http://{lab['lab_bridge_address']}:3142"
    assert done.stdout.splitlines() == [f'Acquire::http::Proxy "{proxy}";', "Apt-Cacher NG"], done.stderr


def test_proxy_is_the_labs_own(host, lab):
    pid = host.file(f"{lab['lab_run_dir']}/apt-cacher-ng.pid").content_string.strip()
    command = host.file(f"/proc/{pid}/cmdline").content_string.split("\0")
    assert command[:3] == ["apt-cacher-ng", "-c", f"{lab['lab_state_dir']}/apt-cacher-ng"]
    conf = host.file(f"{lab['lab_state_dir']}/apt-cacher-ng/acng.conf").content_string
    assert f"BindAddress: {lab['lab_bridge_address']}\n" in conf
    assert f"CacheDir: {lab['lab_proxy_cache_dir']}\n" in conf
    assert host.socket(f"tcp://{lab['lab_bridge_address']}:3142").is_listening


def test_status_reports_the_nodes(lab, nodes):
    shown = task_results(playbook("lab_status", lab))["Show the lab"]["msg"]
    rows = {line.split()[0]: line.split()[1:] for line in shown[1:]}
    assert rows == {name: ["RUNNING", address, "running"] for name, address in nodes.items()}


def test_down_leaves_nothing_of_the_lab(host, lab, nodes):
    report = playbook("lab_down", lab)
    assert any(r.get("changed") for r in task_results(report).values())

    assert [n for n in host.check_output("lxc-ls -1").split() if n.startswith(f"{lab['lab_name']}-")] == []
    for name in nodes:
        assert not host.file(f"/var/lib/lxc/{name}").exists, name
    assert not host.interface(lab["lab_bridge"]).exists
    for path in (lab["lab_state_dir"], lab["lab_run_dir"], lab["lab_inventory_file"]):
        assert not host.file(path).exists, path
    # No process of this lab: its proxy, a container's monitor or init (lxc-start's command names the node).
    left = [
        line
        for line in host.check_output("ps -eo args").splitlines()
        if lab["lab_state_dir"] in line or any(f" {name}" in f" {line} " for name in nodes)
    ]
    assert left == []
    assert not host.socket(f"tcp://{lab['lab_bridge_address']}:3142").is_listening

    # A second down (an interrupted one run again) finds nothing to do.
    again = task_results(playbook("lab_down", lab))
    assert [name for name, r in again.items() if r.get("changed")] == []


def test_main_lab_is_as_it_was(host, main_lab):
    """After this lab's up and down: the main lab's bridge and address, every node it recorded running, and
    its proxy the same process (never restarted), still serving on the main bridge."""
    main = host.interface("tslab0")
    assert main.exists and main_lab["bridge_address"].split("/")[0] in main.addresses
    for node in main_lab["layout"]["nodes"]:
        assert host.check_output(f"lxc-info -n {node['name']} -sH") == "RUNNING", node["name"]
    assert host.file("/run/trainstack-lab/apt-cacher-ng.pid").content_string.strip() == main_lab["proxy_pid"]
    assert host.process.get(pid=int(main_lab["proxy_pid"])).comm == "apt-cacher-ng"
    assert host.socket(f"tcp://{main_lab['bridge_address'].split('/')[0]}:3142").is_listening
