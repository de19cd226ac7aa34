"""The HyperPod lifecycle script (playbooks/files/hyperpod_on_create.sh) on the lab's three nodes, as HyperPod
runs it on a Slurm cluster.

Each node gets what HyperPod provides before OnCreate: /opt/ml/config/resource_config.json (controller group
ts-head, one worker group of ts-compute1 and ts-compute2, by the lab's addresses) and the lifecycle bundle
(on_create.sh, provisioning_parameters.json and the node bundle, fetched from the controller over HTTP on the
lab bridge). The script runs on all three nodes at once, as HyperPod runs it, with the lab's /shared standing
in for FSx. Slurm must then be the cluster the files describe: exactly the two workers idle in the partition
provisioning_parameters.json names, a batch job that completes and is in accounting. A second run must change
nothing; a provisioning_parameters.json whose controller group is unknown must fail naming the key before
anything changes.

The cluster keeps the lab's cluster name (resource_config.json's ClusterName), so slurmctld's saved state and
the accounting database stay valid. Afterwards every file the test and the script added is removed, and the
lab's own Slurm (playbooks/slurm_cluster.yml on inventories/local: munge key, slurm.conf, slurmdbd) is put
back for the tests that follow.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shlex
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.support import (
    REPO,
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
HOSTNAMES = {HEAD: "ts-head", COMPUTE1: "ts-compute1", COMPUTE2: "ts-compute2"}
CONTROLLER_GROUP, WORKER_GROUP, PARTITION = "controller-machine", "worker-group-1", "hp-dev"
RESOURCE_CONFIG = {
    "ClusterConfig": {
        "ClusterArn": "arn:aws:sagemaker:us-east-1:111122223333:cluster/lab",
        "ClusterName": "lab",
    },
    "InstanceGroups": [
        {
            "Name": group,
            # The instance catalog's entry for the lab's containers (node_health's expectations).
            "InstanceType": "lab",
            "Instances": [
                {
                    "InstanceName": f"{group}-{number}",
                    "CustomerIpAddress": address,
                    "AgentIpAddress": f"172.16.0.{10 + index}",
                    "InstanceId": f"i-0lab{index:012d}",
                }
                for number, (index, address) in enumerate(members, start=1)
            ],
        }
        for group, members in (
            (CONTROLLER_GROUP, [(1, HEAD)]),
            (WORKER_GROUP, [(2, COMPUTE1), (3, COMPUTE2)]),
        )
    ],
}
PARAMETERS = {
    "version": "1.0.0",
    "workload_manager": "slurm",
    "controller_group": CONTROLLER_GROUP,
    "worker_groups": [{"instance_group_name": WORKER_GROUP, "partition_name": PARTITION}],
}
LIFECYCLE = "/root/hyperpod-lifecycle"
LIFECYCLE_FILES = (
    "on_create.sh",
    "provisioning_parameters.json",
    "node-bundle.tar.gz",
    "node-bundle.tar.gz.sha256",
)
WORK_DIR = "/opt/trainstack/hyperpod"
# The lab has no SSM: the cluster's munge key is a root-only file on each node (hyperpod_munge_key_file), one
# key for the three nodes, as the SSM parameter is on AWS.
MUNGE_KEY_FILE = "/root/hyperpod-munge.key"
MUNGE_KEY = base64.b64encode(os.urandom(1024)).decode("ascii")
# The lab's shared directory stands in for FSx; the script is told so, as its -e options allow.
SHARED = "/shared"
STATE_DIR = f"{SHARED}/.trainstack-hyperpod"
# Paths the script (and this test) may create; those absent before the test are removed after it.
CREATED_PATHS = [
    "/opt/ml",
    LIFECYCLE,
    MUNGE_KEY_FILE,
    "/opt/trainstack",
    STATE_DIR,
    "/etc/trainstack/hyperpod.json",
    "/etc/trainstack/hyperpod",
    "/etc/trainstack/node_bootstrap.json",
    "/etc/trainstack/node_health.json",
    "/usr/local/lib/trainstack/node_health",
    "/var/lib/trainstack/node_health",
    "/usr/local/lib/trainstack/monitoring",
    "/etc/slurm/prolog.d/50-trainstack-node-health.sh",
    "/etc/slurm/epilog.d/50-trainstack-node-health.sh",
    "/etc/systemd/system/trainstack-efa-exporter.service",
    "/etc/systemd/system/trainstack-efa-exporter.timer",
]
PARENT_DIRS = ["/etc/trainstack", "/usr/local/lib/trainstack", "/var/lib/trainstack"]
PACKAGES = ("prometheus-node-exporter", "python3-venv", "python3.11-venv")
FETCH = "import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])"
RECAP = re.compile(r"^(\S+)\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0", re.MULTILINE)


def _on_create(address: str, *args: str) -> Any:
    """Run the lifecycle script from its directory as root, as HyperPod does."""
    options = [
        *("-e", f"hyperpod_shared_dir={SHARED}", "-e", "hyperpod_wait_timeout=600"),
        *("-e", f"hyperpod_munge_key_file={MUNGE_KEY_FILE}"),
        *args,
    ]
    command = (
        f"export http_proxy={PROXY} https_proxy={PROXY} no_proxy={BRIDGE},localhost,127.0.0.1; "
        f"cd {LIFECYCLE} && bash on_create.sh {shlex.join(options)}"
    )
    return lab_ssh(address, command, timeout=1200)


def _run_all() -> dict[str, Any]:
    """All three nodes at once: the controller waits for the workers' records, the workers for its key."""
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {address: pool.submit(_on_create, address) for address in HOSTNAMES}
    return {address: future.result() for address, future in futures.items()}


def _tail(proc: Any) -> str:
    return f"{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"


@pytest.fixture(scope="module")
def lifecycle_url(lab: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The lifecycle bundle as HyperPod would copy it from S3, served on the lab bridge."""
    out = tmp_path_factory.mktemp("hyperpod-lifecycle")
    playbook("node_bundle", "-e", f"node_bundle_dir={out}")
    shutil.copy(REPO / "playbooks" / "files" / "hyperpod_on_create.sh", out / "on_create.sh")
    (out / "provisioning_parameters.json").write_text(json.dumps(PARAMETERS, indent=1))
    bad = {**PARAMETERS, "controller_group": "no-such-group"}
    (out / "bad_parameters.json").write_text(json.dumps(bad, indent=1))
    with serve_directory(out, host=BRIDGE) as (base_url, _requests):
        yield base_url


def _lay_out(address: str, base_url: str) -> None:
    """HyperPod's node files: resource_config.json where HyperPod writes it, the lifecycle bundle beside."""
    fetches = " && ".join(
        f"python3 -c {shlex.quote(FETCH)} {base_url}/{name} {LIFECYCLE}/{name}"
        for name in (*LIFECYCLE_FILES, "bad_parameters.json")
    )
    on_lab_node(
        f"mkdir -p /opt/ml/config {LIFECYCLE} && "
        f"printf %s {shlex.quote(json.dumps(RESOURCE_CONFIG))} > /opt/ml/config/resource_config.json && "
        f"(umask 077 && printf %s {shlex.quote(MUNGE_KEY)} > {MUNGE_KEY_FILE}) && "
        f"{fetches}",
        address,
    )


@pytest.fixture(scope="module")
def hyperpod_nodes(slurm_lab: None, lifecycle_url: str) -> Iterator[None]:
    """HyperPod's files on the three nodes; afterwards every node as it was and the lab's own Slurm back."""
    before = {
        address: lab_node_state(address, CREATED_PATHS + PARENT_DIRS, PACKAGES) for address in HOSTNAMES
    }
    try:
        for address in HOSTNAMES:
            _lay_out(address, lifecycle_url)
        yield
    finally:
        for address, state in before.items():
            restore_lab_node(address, state, CREATED_PATHS, PARENT_DIRS, PACKAGES)
        started = time.monotonic()
        playbook("slurm_cluster", "-i", "inventories/local")
        print(f"lab Slurm restored in {time.monotonic() - started:.0f} s")


@pytest.fixture(scope="module")
def first_run(hyperpod_nodes: None) -> dict[str, Any]:
    started = time.monotonic()
    results = _run_all()
    print(f"first on_create.sh on three nodes: {time.monotonic() - started:.0f} s")
    return results


def test_each_node_finds_its_role(first_run: dict[str, Any]) -> None:
    expected = {
        HEAD: ("controller", CONTROLLER_GROUP, ""),
        COMPUTE1: ("worker", WORKER_GROUP, PARTITION),
        COMPUTE2: ("worker", WORKER_GROUP, PARTITION),
    }
    for address, proc in first_run.items():
        assert proc.returncode == 0, f"{address}: {_tail(proc)}"
        role, group, partition = expected[address]
        assert f"[plan] this node is the {role} of instance group {group}" in proc.stdout
        assert "[done] HyperPod node setup finished" in proc.stdout
        record = json.loads(on_lab_node("cat /etc/trainstack/hyperpod.json", address))
        assert (record["role"], record["group"], record["partition"]) == (role, group, partition)
        assert record["node_name"] == HOSTNAMES[address]
        assert record["nodes"] == list(HOSTNAMES.values())


def test_the_munge_key_is_installed_and_no_copy_is_on_the_shared_directory(first_run: dict[str, Any]) -> None:
    """Every node holds the cluster's key in /etc/munge only (0400 munge); the shared directory holds none."""
    assert all(proc.returncode == 0 for proc in first_run.values())
    digest = hashlib.sha256(base64.b64decode(MUNGE_KEY)).hexdigest()
    for address in HOSTNAMES:
        key = "/etc/munge/munge.key"
        installed = on_lab_node(f"sha256sum {key}; stat -c '%a %U' {key}", address)
        assert installed.split() == [digest, key, "400", "munge"], address
    shared = on_lab_node(f"find {STATE_DIR} -type f -exec sha256sum {{}} +", HEAD).split()
    assert digest not in shared and not any("munge" in path for path in shared[1::2]), shared


def _sinfo() -> set[str]:
    return set(on_lab_node("sinfo --noheader --Node --format '%N %R %T'", HEAD).splitlines())


def test_sinfo_shows_exactly_the_two_workers_idle(first_run: dict[str, Any]) -> None:
    assert all(proc.returncode == 0 for proc in first_run.values())
    wanted = {f"ts-compute1 {PARTITION} idle", f"ts-compute2 {PARTITION} idle"}
    deadline = time.monotonic() + 90
    while (found := _sinfo()) != wanted and time.monotonic() < deadline:
        time.sleep(3)
    assert found == wanted
    conf = on_lab_node("cat /etc/slurm/slurm.conf", COMPUTE1)
    assert "PartitionName=hp-dev Nodes=ts-compute1,ts-compute2 Default=YES" in conf
    assert "NodeName=ts-head" not in conf


def test_a_batch_job_completes_and_is_accounted(first_run: dict[str, Any]) -> None:
    assert all(proc.returncode == 0 for proc in first_run.values())
    submit = lab_ssh(
        HEAD,
        f"cd /tmp && sbatch --parsable --wait --partition {PARTITION} --nodes 2 --time 2 --output /dev/null "
        "--wrap 'srun hostname'",
        timeout=300,
    )
    assert submit.returncode == 0, _tail(submit)
    job = submit.stdout.strip().split(";")[0]
    expected = [f"{job}|COMPLETED|{PARTITION}|2"]
    # slurmctld sends a job's records to slurmdbd through a queue: under load the end record can arrive before
    # the start record that carries the partition, so the row is read until it is whole (or the minute is up).
    deadline = time.monotonic() + 60
    while True:
        rows = on_lab_node(
            f"sacct --noheader --parsable2 -X -j {job} --format JobID,State,Partition,NNodes", HEAD
        )
        if rows.splitlines() == expected or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert rows.splitlines() == expected


def test_second_run_changes_nothing(first_run: dict[str, Any]) -> None:
    assert all(proc.returncode == 0 for proc in first_run.values())
    started = time.monotonic()
    second = _run_all()
    print(f"second on_create.sh on three nodes: {time.monotonic() - started:.0f} s")
    for address, proc in second.items():
        assert proc.returncode == 0, f"{address}: {_tail(proc)}"
        assert f"already in {WORK_DIR}/venv" in proc.stdout
        assert f"already installed in {WORK_DIR}/collections" in proc.stdout
        assert RECAP.findall(proc.stdout) == [(HOSTNAMES[address], "0")], f"{address}: {proc.stdout[-4000:]}"


def test_an_unknown_controller_group_fails_naming_the_key_and_changes_nothing(
    first_run: dict[str, Any],
) -> None:
    assert all(proc.returncode == 0 for proc in first_run.values())
    snapshot = "sha256sum /etc/slurm/slurm.conf /etc/munge/munge.key /etc/trainstack/hyperpod.json"
    before = on_lab_node(snapshot, COMPUTE2)
    proc = _on_create(
        COMPUTE2,
        "--provisioning-parameters",
        f"{LIFECYCLE}/bad_parameters.json",
        "--work-dir",
        "/opt/trainstack/hyperpod-bad",
    )
    assert proc.returncode == 1, _tail(proc)
    assert proc.stderr.strip().splitlines()[-1] == (
        "trainstack-hyperpod: step plan failed: "
        f"provisioning_parameters.json ({LIFECYCLE}/bad_parameters.json): "
        "controller_group 'no-such-group' is not an instance group of resource_config.json "
        f"(/opt/ml/config/resource_config.json) (groups: {CONTROLLER_GROUP}, {WORKER_GROUP})"
    )
    assert "[playbook]" not in proc.stdout
    assert on_lab_node(snapshot, COMPUTE2) == before
    assert on_lab_node("test -e /opt/trainstack/hyperpod-bad && echo yes || echo no", COMPUTE2) == "no"
