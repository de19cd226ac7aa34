"""The HyperPod lifecycle script's checks and role detection, run for real on this machine with --check-only:
HyperPod's resource_config.json names this machine by its loopback address (an address every machine has),
and the script must find its role and partition, or refuse a wrong input with one line naming the file and
the key, before anything is installed.

What follows the checks (ansible-core, the collection, the node playbook and a working Slurm cluster) runs on
the lab's nodes: tests/integration/cluster/test_hyperpod_lifecycle_lab.py.
"""

from __future__ import annotations

import copy
import io
import json
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO, case_params

pytestmark = pytest.mark.cluster

SCRIPT = REPO / "playbooks" / "files" / "hyperpod_on_create.sh"
HERE = "127.0.0.1"
RESOURCE_CONFIG: dict[str, Any] = {
    "ClusterConfig": {
        "ClusterArn": "arn:aws:sagemaker:us-east-1:111122223333:cluster/abc",
        "ClusterName": "Train-1",
    },
    "InstanceGroups": [
        {
            "Name": "controller-machine",
            "InstanceType": "ml.m5.xlarge",
            "Instances": [{"InstanceName": "controller-machine-1", "CustomerIpAddress": "192.0.2.10"}],
        },
        {
            "Name": "login-group",
            "InstanceType": "ml.m5.large",
            "Instances": [{"InstanceName": "login-group-1", "CustomerIpAddress": "192.0.2.11"}],
        },
        {
            "Name": "gpu",
            "InstanceType": "ml.p5.48xlarge",
            "Instances": [
                {"InstanceName": "gpu-1", "CustomerIpAddress": "192.0.2.20"},
                {"InstanceName": "gpu-2", "CustomerIpAddress": "192.0.2.21"},
            ],
        },
    ],
}
PARAMETERS: dict[str, Any] = {
    "version": "1.0.0",
    "workload_manager": "slurm",
    "controller_group": "controller-machine",
    "login_group": "login-group",
    "worker_groups": [{"instance_group_name": "gpu", "partition_name": "train"}],
}


def _tar_bytes(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def lifecycle(tmp_path: Path) -> Path:
    """A lifecycle directory as HyperPod copies it: the script, the node bundle (holding the collection with
    the real node_bootstrap.sh the script reads its functions from) and provisioning_parameters.json."""
    directory = tmp_path / "lifecycle"
    directory.mkdir()
    (directory / "on_create.sh").write_text(SCRIPT.read_text())
    collection = _tar_bytes(
        {"playbooks/files/node_bootstrap.sh": (REPO / "playbooks/files/node_bootstrap.sh").read_bytes()}
    )
    (directory / "node-bundle.tar.gz").write_bytes(
        _tar_bytes({"./trainstack-cluster-0.1.0.tar.gz": collection})
    )
    return directory


def on_create(
    lifecycle: Path, resource: dict[str, Any], parameters: dict[str, Any], here: tuple[str, int] | None
) -> subprocess.CompletedProcess:
    """Run the script with --check-only; ``here`` is the (group index, instance index) given this machine's
    address."""
    resource = copy.deepcopy(resource)
    if here is not None:
        group, instance = here
        resource["InstanceGroups"][group]["Instances"][instance]["CustomerIpAddress"] = HERE
    (lifecycle / "resource_config.json").write_text(json.dumps(resource))
    (lifecycle / "provisioning_parameters.json").write_text(json.dumps(parameters))
    return subprocess.run(
        ["bash", str(lifecycle / "on_create.sh"), "--check-only", "--work-dir", str(lifecycle / "work")],
        env={
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "TRAINSTACK_HYPERPOD_RESOURCE_CONFIG": str(lifecycle / "resource_config.json"),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def plan(proc: subprocess.CompletedProcess) -> dict[str, Any]:
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    return json.loads(proc.stdout[proc.stdout.index("{") :])


@pytest.mark.parametrize(
    ("here", "role", "group", "partition", "line"),
    [
        (
            (0, 0),
            "controller",
            "controller-machine",
            "",
            "the controller of instance group controller-machine",
        ),
        ((1, 0), "login", "login-group", "", "the login of instance group login-group"),
        ((2, 1), "worker", "gpu", "train", "the worker of instance group gpu (partition train)"),
    ],
    ids=["controller", "login", "worker"],
)
def test_the_node_finds_its_role_by_its_address(
    lifecycle: Path, here: tuple[int, int], role: str, group: str, partition: str, line: str
) -> None:
    proc = on_create(lifecycle, RESOURCE_CONFIG, PARAMETERS, here)
    found = plan(proc)
    assert f"[plan] this node is {line} at 127.0.0.1 in cluster train-1" in proc.stdout
    found_role = (found["hyperpod_role"], found["hyperpod_group"], found["hyperpod_partition"])
    assert found_role == (role, group, partition)
    assert found["hyperpod_address"] == HERE
    # The whole cluster, in resource_config.json's order, each node with its role and partition.
    assert [(n["role"], n["partition"]) for n in found["hyperpod_nodes"]] == [
        ("controller", ""),
        ("login", ""),
        ("worker", "train"),
        ("worker", "train"),
    ]
    assert found["hyperpod_partitions"] == [{"name": "train", "groups": ["gpu"]}]
    assert found["hyperpod_cluster_name"] == "train-1"
    assert not (lifecycle / "work").exists()


def _with(parameters: dict[str, Any], **changes: Any) -> dict[str, Any]:
    changed = copy.deepcopy(parameters)
    for key, value in changes.items():
        if value is None:
            changed.pop(key)
        else:
            changed[key] = value
    return changed


PP = "provisioning_parameters.json ("
RC = "resource_config.json ("
NOT_A_GROUP = "is not an instance group of resource_config.json"
GPU_WORKERS = [{"instance_group_name": "gpu", "partition_name": "train"}]
# (case id, resource_config.json, provisioning_parameters.json, this machine's instance, what the line names)
BAD_INPUTS = [
    (
        "unknown-controller-group",
        RESOURCE_CONFIG,
        _with(PARAMETERS, controller_group="no-such-group"),
        (0, 0),
        [
            PP,
            f"controller_group 'no-such-group' {NOT_A_GROUP}",
            "(groups: controller-machine, gpu, login-group)",
        ],
    ),
    (
        "no-controller-group",
        RESOURCE_CONFIG,
        _with(PARAMETERS, controller_group=None),
        (0, 0),
        [PP, "controller_group is required"],
    ),
    (
        "two-controllers",
        RESOURCE_CONFIG,
        _with(
            PARAMETERS,
            controller_group="gpu",
            login_group=None,
            worker_groups=[{"instance_group_name": "login-group", "partition_name": "x"}],
        ),
        (0, 0),
        [PP, "controller_group 'gpu' must hold exactly one instance (it holds 2)"],
    ),
    (
        "unknown-login-group",
        RESOURCE_CONFIG,
        _with(PARAMETERS, login_group="nope"),
        (0, 0),
        [PP, f"login_group 'nope' {NOT_A_GROUP}"],
    ),
    (
        "unknown-worker-group",
        RESOURCE_CONFIG,
        _with(PARAMETERS, worker_groups=[{**GPU_WORKERS[0], "instance_group_name": "gpus"}]),
        (0, 0),
        [PP, f"worker_groups[0].instance_group_name 'gpus' {NOT_A_GROUP}"],
    ),
    (
        "bad-partition-name",
        RESOURCE_CONFIG,
        _with(PARAMETERS, worker_groups=[{**GPU_WORKERS[0], "partition_name": "a b"}]),
        (0, 0),
        [PP, "worker_groups[0].partition_name must be letters, digits, - and _ (got 'a b')"],
    ),
    (
        "not-slurm",
        RESOURCE_CONFIG,
        _with(PARAMETERS, workload_manager="eks"),
        (0, 0),
        [PP, "workload_manager must be slurm (got 'eks')"],
    ),
    (
        "node-in-no-role",
        RESOURCE_CONFIG,
        _with(PARAMETERS, login_group=None),
        (1, 0),
        [PP, "the instance group of this node, 'login-group', is not named by controller_group, login_group"],
    ),
    (
        "node-not-found",
        RESOURCE_CONFIG,
        PARAMETERS,
        None,
        [RC, "no instance has a CustomerIpAddress of this node (", "127.0.0.1"],
    ),
    ("no-groups", {"InstanceGroups": []}, PARAMETERS, None, [RC, "InstanceGroups must be a non-empty list"]),
    (
        "munge-key-parameter-not-a-name",
        RESOURCE_CONFIG,
        _with(PARAMETERS, munge_key_ssm_parameter="s3://bucket/munge.key", aws_region="us-east-1"),
        (0, 0),
        [
            PP,
            "munge_key_ssm_parameter must be an SSM parameter name starting with / (got 's3://bucket/munge.key')",
        ],
    ),
    (
        "munge-key-parameter-without-region",
        RESOURCE_CONFIG,
        _with(PARAMETERS, munge_key_ssm_parameter="/trainstack/hyperpod/train-1/munge-key"),
        (0, 0),
        [PP, "aws_region must be the AWS region of munge_key_ssm_parameter"],
    ),
]


def test_the_plan_names_the_munge_key_parameter_the_cluster_module_wrote(lifecycle: Path) -> None:
    """The node reads its munge key from SSM (playbooks/hyperpod_node.yml): the plan carries where."""
    parameters = _with(
        PARAMETERS, munge_key_ssm_parameter="/trainstack/hyperpod/train-1/munge-key", aws_region="eu-west-1"
    )
    found = plan(on_create(lifecycle, RESOURCE_CONFIG, parameters, (2, 0)))
    assert found["hyperpod_munge_key_parameter"] == "/trainstack/hyperpod/train-1/munge-key"
    assert found["hyperpod_aws_region"] == "eu-west-1"
    # Without it (the lab's layout), the plan says none: the node playbook then wants a node-local key file.
    assert (
        plan(on_create(lifecycle, RESOURCE_CONFIG, PARAMETERS, (2, 0)))["hyperpod_munge_key_parameter"] == ""
    )


@pytest.mark.parametrize(("resource", "parameters", "here", "fragments"), case_params(BAD_INPUTS))
def test_a_wrong_input_is_refused_naming_the_file_and_key(
    lifecycle: Path,
    resource: dict[str, Any],
    parameters: dict[str, Any],
    here: tuple[int, int] | None,
    fragments: list[str],
) -> None:
    proc = on_create(lifecycle, resource, parameters, here)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("trainstack-hyperpod: step plan failed: "), proc.stderr
    for fragment in fragments:
        assert fragment in last, last
    assert not (lifecycle / "work").exists()


def test_a_bundle_without_the_collection_is_refused(lifecycle: Path) -> None:
    (lifecycle / "node-bundle.tar.gz").write_bytes(_tar_bytes({"./other.txt": b"x"}))
    proc = on_create(lifecycle, RESOURCE_CONFIG, PARAMETERS, (0, 0))
    assert proc.returncode == 1
    assert (
        proc.stderr.strip().splitlines()[-1].startswith("trainstack-hyperpod: step bundle failed: ")
        and "holds no trainstack-cluster-*.tar.gz" in proc.stderr
    )
