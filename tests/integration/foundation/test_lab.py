"""The lab: real LXC system containers with systemd as PID 1, reachable through the inventory it writes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO, VENV_BIN, link_exists, own_nodes_done, playbook, run

pytestmark = pytest.mark.lab

STATE = Path("/var/lib/trainstack/lab")


def _containers(prefix: str) -> list[str]:
    out = subprocess.run(["lxc-ls", "-1"], capture_output=True, text=True, check=True).stdout.split()
    return [name for name in out if name.startswith(prefix)]


def test_three_nodes_run_systemd(lab: None) -> None:
    proc = playbook("lab_status")
    rows = re.findall(r"(ts-\S+)\s+(RUNNING|STOPPED)\s+(\S+)\s+(\S+)", proc.stdout)
    # Other containers may share the prefix: molecule's ts-m-*, an image build's ts-image-build meanwhile.
    nodes = re.compile(r"ts-(head|compute\d+)$")
    lab_rows = {name: (state, ip, sd) for name, state, ip, sd in rows if nodes.match(name)}
    assert lab_rows == {
        "ts-head": ("RUNNING", "10.77.0.11", "running"),
        "ts-compute1": ("RUNNING", "10.77.0.12", "running"),
        "ts-compute2": ("RUNNING", "10.77.0.13", "running"),
    }


def test_inventory_reaches_every_node(lab: None) -> None:
    proc = run([str(VENV_BIN / "ansible"), "-i", "inventories/local", "all", "-m", "ansible.builtin.ping"])
    assert sorted(re.findall(r"^(\S+) \| SUCCESS", proc.stdout, re.M)) == [
        "ts-compute1",
        "ts-compute2",
        "ts-head",
    ]
    groups = json.loads(
        run([str(VENV_BIN / "ansible-inventory"), "-i", "inventories/local", "--list"]).stdout
    )
    assert groups["head"]["hosts"] == ["ts-head"]
    assert sorted(groups["compute"]["hosts"]) == ["ts-compute1", "ts-compute2"]


def test_nodes_share_a_directory_and_know_each_other(lab: None) -> None:
    marker = f"written-by-head-{os.getpid()}"
    run(
        [
            str(VENV_BIN / "ansible"),
            "-i",
            "inventories/local",
            "ts-head",
            "-m",
            "ansible.builtin.shell",
            "-a",
            f"echo {marker} > /shared/lab-test && getent hosts ts-compute2",
        ]
    )
    proc = run(
        [
            str(VENV_BIN / "ansible"),
            "-i",
            "inventories/local",
            "ts-compute2",
            "-m",
            "ansible.builtin.command",
            "-a",
            "cat /shared/lab-test",
        ]
    )
    assert marker in proc.stdout


def _system_state(node: str) -> str:
    cmd = ["lxc-attach", "-n", node, "--", "systemctl", "is-system-running", "--wait"]
    return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120).stdout.strip()


# A node of the tests' own, started by the lab role as lab-up starts the lab's (one node, its own address):
# the rescue tests break and restart it, not a node that the shared lab's later tests use.
OWN_NODE = [str(VENV_BIN / "ansible-playbook"), "tests/integration/foundation/own_node.yml"]
RESCUE_NODE = ["-e", "own_node_name=ts-m-rescue", "-e", "own_node_octet=191"]
RESCUE_NODE += ["-e", "own_node_start_timeout=90"]


@pytest.fixture(scope="module")
def rescue_node(lab_network: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """The running node ts-m-rescue, made from the lab's base image; yields the command that starts it."""
    inventory = tmp_path_factory.mktemp("rescue") / "hosts.yml"
    start = [*OWN_NODE, *RESCUE_NODE, "-e", f"own_node_inventory={inventory}"]
    run(start)
    try:
        yield start
    finally:
        run([*OWN_NODE, *RESCUE_NODE, "-e", "own_node_state=absent"])


@pytest.mark.own_nodes
def test_node_that_no_longer_boots_is_kept_or_made_anew(rescue_node: list[str]) -> None:
    # What an interrupted earlier run can leave: a node with a unit that fails at every boot (here a named
    # stand-in unit; in CI it was slurmctld). By default lab-up keeps it for inspection and says why; with
    # lab_recreate_failed (make molecule sets it) the node is made again from the base image.
    node = "ts-m-rescue"
    rootfs = Path("/var/lib/lxc") / node / "rootfs"
    unit = rootfs / "etc/systemd/system/ts-standin-broken.service"
    unit.write_text("[Service]\nType=oneshot\nExecStart=/bin/false\n[Install]\nWantedBy=multi-user.target\n")
    (rootfs / "etc/systemd/system/multi-user.target.wants/ts-standin-broken.service").symlink_to(
        "/etc/systemd/system/ts-standin-broken.service"
    )
    subprocess.run(["lxc-stop", "-n", node], check=True, timeout=120)

    kept = run(rescue_node, check=False)
    assert kept.returncode != 0
    assert (
        f"Node {node} failed to start (it existed before this run and was left for inspection" in kept.stdout
    ), kept.stdout[-3000:]
    assert "ts-standin-broken.service" in kept.stdout
    assert unit.exists()

    run([*rescue_node, "-e", "own_node_recreate_failed=true"])
    assert not unit.exists()
    assert _system_state(node) == "running"


@pytest.mark.own_nodes
def test_a_node_this_run_made_that_does_not_boot_is_removed(lab_network: None, tmp_path: Path) -> None:
    # The other half of lab-up's rescue: a node that the failing run itself created is removed, not kept, so
    # nothing half-made is left behind. Stand-in image: a root filesystem with the directories lab-up writes
    # into (keys, hosts, proxy, CA bundle, authorized_keys) but no init, so the container cannot boot.
    node = "ts-m-bootfail"
    rootfs = tmp_path / "rootfs"
    for sub in ("etc/ssh", "etc/apt/apt.conf.d", "etc/profile.d", "etc/ssl/certs", "root/.ssh", "sbin"):
        (rootfs / sub).mkdir(parents=True)
    (rootfs / "usr/local/share/ca-certificates").mkdir(parents=True)
    (rootfs / "etc/os-release").write_text("ID=trainstack-standin-no-init\n")
    image = tmp_path / "no-init.rootfs.tar"
    run(["tar", "--numeric-owner", "-cf", str(image), "-C", str(rootfs), "."])
    try:
        failed = run(
            [*OWN_NODE, "-e", f"own_node_image={image}", "-e", f"own_node_inventory={tmp_path}/hosts.yml"],
            check=False,
        )
        assert failed.returncode != 0
        assert f"Node {node} failed to start and was removed" in failed.stdout, failed.stdout[-3000:]
        assert _containers(node) == []
        assert not (Path("/var/lib/lxc") / node).exists()
    finally:
        run([*OWN_NODE, "-e", "own_node_state=absent"])


def _mac(node: str) -> str:
    return run(["lxc-attach", "-n", node, "--", "cat", "/sys/class/net/eth0/address"]).stdout.strip()


@pytest.mark.own_nodes
def test_a_restarted_node_keeps_its_address_and_answers_at_once(rescue_node: list[str]) -> None:
    # With a new random MAC address at every start, the host's neighbour cache still held the old one and a
    # node restarted at once stayed unreachable past lab-up's 30 s wait for SSH (1 restart in 2, here). Each
    # node now has a fixed one: 02:74 followed by the four octets of its IPv4 address.
    node = "ts-m-rescue"
    ip = run(["lxc-info", "-n", node, "-iH"]).stdout.split()[0]
    assert ip == "10.77.0.191"
    expected = "02:74:" + ":".join(f"{int(octet):02x}" for octet in ip.split("."))
    assert _mac(node) == expected
    # The address is fixed, not drawn: one restart shows it (the failure above needed luck to show).
    subprocess.run(["lxc-stop", "-n", node], check=True, timeout=120)
    run(rescue_node)
    assert _mac(node) == expected


def test_lab_up_twice_changes_nothing(lab: None) -> None:
    proc = playbook("lab_up", "-e", "lab_node_count=3")
    assert re.search(r"localhost\s+: ok=\d+\s+changed=0\s", proc.stdout), proc.stdout[-2000:]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["-e", "lab_node_count=0"], "lab_node_count=0 must be 1..40"),
        (["-e", "lab_node_count=abc"], "lab_node_count"),
        (
            ["-e", '{"lab_node_count": 2, "lab_node_names": ["tsbad-a", "tsbad-a"]}'],
            "no duplicates (['tsbad-a'])",
        ),
    ],
    ids=["zero-nodes", "not-a-number", "duplicate-name"],
)
def test_bad_input_fails_before_creating_anything(lab_required: None, extra: list[str], message: str) -> None:
    before = _containers("tsbad-")
    proc = playbook("lab_up", "-e", "lab_name=tsbad", "-e", "lab_bridge=tsbad0", *extra, check=False)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr
    assert _containers("tsbad-") == before == []
    assert not link_exists("tsbad0")


def test_not_root_is_refused(lab_required: None) -> None:
    home = Path(tempfile.mkdtemp(prefix="trainstack-nobody-"))
    os.chown(home, 65534, 65534)
    env = {
        "PATH": f"{VENV_BIN}:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(home),
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"),
        "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
        "ANSIBLE_REMOTE_TEMP": str(home / "remote-tmp"),
        "ANSIBLE_NOCOLOR": "1",
    }
    proc = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            str(VENV_BIN / "ansible-playbook"),
            "trainstack.cluster.lab_up",
            "-e",
            "lab_name=tsbad",
            "-e",
            "lab_bridge=tsbad0",
            # The venv's interpreter lives under /root; modules run under the system Python instead.
            "-e",
            "ansible_python_interpreter=/usr/bin/python3",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=False,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "The lab needs root" in proc.stdout + proc.stderr
    assert not link_exists("tsbad0")


def test_lab_down_refuses_a_directory_the_lab_did_not_make(lab: None, tmp_path: Path) -> None:
    """A run directory set by mistake to a system directory: lab-down names it and removes nothing at all,
    neither that directory nor the lab's containers, bridge or state."""
    system = tmp_path / "etc-ssh"
    system.mkdir()
    (system / "sshd_config").write_text("Port 22\n")
    nodes = [name for name in _containers("ts-") if re.match(r"^ts-(head|compute\d+)$", name)]
    proc = playbook("lab_down", "-e", f"lab_run_dir={system}", check=False)
    assert proc.returncode != 0
    refusal = f"{system} holds no .trainstack-lab file reading 'trainstack-lab: tslab0'"
    assert refusal in proc.stdout, proc.stdout
    assert (system / "sshd_config").is_file()
    assert len(nodes) == 3 and set(nodes) <= set(_containers("ts-"))
    assert link_exists("tslab0") and STATE.is_dir()


@pytest.mark.lab_teardown
def test_lab_down_leaves_nothing(lab_required: None) -> None:
    with own_nodes_done():
        playbook("lab_down")
    assert _containers("ts-") == []
    assert not link_exists("tslab0")
    assert (
        subprocess.run(["pgrep", "-f", "apt-cacher-ng -c /var/lib/trainstack"], check=False).returncode == 1
    )
    assert not STATE.exists()
    assert not (REPO / "inventories" / "local" / "hosts.yml").exists()
