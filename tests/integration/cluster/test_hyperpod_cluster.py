"""playbooks/hyperpod_cluster.yml against a real moto server (one per module): a spec and a foundation record
become a lifecycle directory in S3 and a HyperPod cluster that turns InService; a second run changes nothing;
the ec2_cluster inventory plugin finds the cluster's nodes through SageMaker's ListClusterNodes; state=absent
deletes it. Bad inputs stop before any call: moto then holds no cluster and no new S3 object.

The foundation record is written here as cluster_foundation records it, and the node bundle is a small
stand-in for the one playbooks/node_bundle.yml builds (the playbook only copies it). Each refusal is one
playbook run (about 6 s on a 2-core host); the full run is five playbook runs and an ansible-inventory (about
45 s), so it is marked slow; the module's own create, re-run and delete against moto run in the unit tests
(tests/unit/plugins/modules/test_hyperpod_cluster.py), with the scale path, which moto lacks (UpdateCluster).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import REPO, VENV_BIN, MotoServer, moto_aws_env, playbook, run, start_moto

from .pcluster_fleet import inventory_env

pytestmark = [pytest.mark.moto, pytest.mark.cluster]

SPEC = REPO / "inventories" / "aws" / "hyperpod" / "train-hp.yml"
REGION = "us-east-1"
BUCKET = "sagemaker-trainstack-train-hp"
PREFIX = "hyperpod/train-hp/"


def outputs(**changes: Any) -> dict[str, str]:
    """aws_foundation_outputs as cluster_foundation records them for the train-hp spec."""
    found = {
        "cluster_name": "train-hp",
        "region": REGION,
        "availability_zone": "us-east-1a",
        "vpc_id": "vpc-0123456789abcdef0",
        "public_subnet_id": "subnet-0aaaaaaaaaaaaaaa1",
        "private_subnet_id": "subnet-0bbbbbbbbbbbbbbb2",
        "security_group_id": "sg-0ccccccccccccccc3",
        "bucket": "trainstack-train-hp-data",
        "instance_role_name": "trainstack-train-hp-node",
        "instance_role_arn": "arn:aws:iam::123456789012:role/trainstack-train-hp-node",
        "instance_profile_arn": "arn:aws:iam::123456789012:instance-profile/trainstack-train-hp-node",
        # The foundation of a HyperPod spec makes the execution role the instance groups run as.
        "hyperpod_execution_role_arn": "arn:aws:iam::123456789012:role/trainstack-train-hp-hyperpod",
        "fsx_file_system_id": "fs-0ddddddddddddddd4",
        "fsx_dns_name": "fs-0ddddddddddddddd4.fsx.us-east-1.amazonaws.com",
        "fsx_mount_name": "abcdefgh",
        "placement_group": "",
    }
    found.update(changes)
    return {key: value for key, value in found.items() if value is not None}


@dataclass
class Dirs:
    records: Path
    bundle: Path
    lifecycle: Path

    def args(self) -> list[str]:
        return [
            "-e",
            f"cluster_foundation_outputs_dir={self.records}",
            "-e",
            f"node_bundle_dir={self.bundle}",
            "-e",
            f"hyperpod_cluster_lifecycle_dir={self.lifecycle}",
            "-e",
            "hyperpod_cluster_poll_interval=1",
        ]


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = start_moto()
    yield server
    server.stop()


@pytest.fixture
def dirs(tmp_path: Path) -> Dirs:
    found = Dirs(tmp_path / "records", tmp_path / "bundle", tmp_path / "lifecycle")
    found.records.mkdir()
    found.bundle.mkdir()
    (found.bundle / "node-bundle.tar.gz").write_bytes(b"stand-in for the node bundle\n")
    (found.bundle / "node-bundle.tar.gz.sha256").write_text(f"{'ab' * 32}  node-bundle.tar.gz\n")
    (found.bundle / "bootstrap.sh").write_text("#!/bin/sh\n")
    return found


def record(dirs: Dirs, data: dict[str, str]) -> None:
    (dirs.records / f"{data['cluster_name']}.foundation.json").write_text(json.dumps(data))


def hyperpod(moto: MotoServer, dirs: Dirs, *extra: str, spec: Path = SPEC) -> subprocess.CompletedProcess:
    env = moto_aws_env(moto.url)
    return playbook(
        "hyperpod_cluster", "-e", f"cluster_spec={spec}", *dirs.args(), *extra, check=False, env=env
    )


def changed(proc: subprocess.CompletedProcess) -> int:
    return int(re.search(r"^localhost\s.*\bchanged=(\d+)", proc.stdout, re.M).group(1))


def clusters(moto: MotoServer) -> list[str]:
    return [c["ClusterName"] for c in moto.client("sagemaker", REGION).list_clusters()["ClusterSummaries"]]


def objects(moto: MotoServer) -> dict[str, str]:
    s3 = moto.client("s3", REGION)
    if BUCKET not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        return {}
    return {o["Key"]: o["ETag"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])}


def listed_inventory(moto: MotoServer, tmp_path: Path) -> dict[str, Any]:
    """ansible-inventory --list of an ec2_cluster source that reads HyperPod clusters from moto."""
    source = tmp_path / "hyperpod.ec2_cluster.yml"
    source.write_text(
        yaml.safe_dump(
            {
                "plugin": "trainstack.cluster.ec2_cluster",
                "regions": [REGION],
                "cluster_kinds": ["hyperpod"],
                "hyperpod_head_groups": ["controller"],
                "hyperpod_login_groups": ["login"],
                "endpoint_url": moto.url,
            }
        )
    )
    done = run(
        [str(VENV_BIN / "ansible-inventory"), "-i", str(source), "--list"], env=inventory_env(), timeout=180
    )
    return json.loads(done.stdout)


def bad_spec(tmp_path: Path) -> Path:
    raw = yaml.safe_load(SPEC.read_text())
    raw["queues"][0]["instance_type"] = "g5g.16xlarge"
    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(
    ("case", "message"),
    [
        (
            "no-role",
            "foundation.execution_role: is required: every HyperPod instance group runs as an IAM role",
        ),
        (
            "no-lifecycle",
            "foundation.lifecycle_s3_uri: is required: every HyperPod instance group (LifeCycleConfig) runs "
            "on_create.sh from this S3 prefix",
        ),
        ("not-offered", "queues[0].instance_type: HyperPod does not offer g5g.16xlarge"),
        (
            "no-on-create",
            "no-such-on_create.sh: the lifecycle script every HyperPod node runs (on_create.sh)",
        ),
    ],
)
def test_a_bad_input_fails_before_any_call(
    moto: MotoServer, dirs: Dirs, tmp_path: Path, case: str, message: str
) -> None:
    no_role = outputs(instance_role_arn=None, hyperpod_execution_role_arn=None)
    record(dirs, no_role if case == "no-role" else outputs())
    extra: list[str] = []
    spec = SPEC
    if case == "no-lifecycle":
        extra = ["-e", "hyperpod_cluster_lifecycle_bucket="]
    elif case == "not-offered":
        spec = bad_spec(tmp_path)
    elif case == "no-on-create":
        extra = ["-e", f"hyperpod_cluster_on_create_script={tmp_path / 'no-such-on_create.sh'}"]
    before = objects(moto)  # another test's lifecycle files may be there already: nothing may be added
    done = hyperpod(moto, dirs, *extra, spec=spec)
    assert done.returncode != 0, done.stdout[-3000:]
    assert message in " ".join(done.stdout.split()), done.stdout[-3000:]
    assert clusters(moto) == []
    assert objects(moto) == before
    assert not (dirs.lifecycle / "train-hp").exists()


@pytest.mark.slow
def test_create_in_service_again_unchanged_found_by_the_inventory_then_delete(
    moto: MotoServer, dirs: Dirs, tmp_path: Path
) -> None:
    record(dirs, outputs())
    first = hyperpod(moto, dirs)
    assert first.returncode == 0, first.stdout[-4000:]
    described = moto.client("sagemaker", REGION).describe_cluster(ClusterName="train-hp")
    assert described["ClusterStatus"] == "InService"
    groups = {g["InstanceGroupName"]: g for g in described["InstanceGroups"]}
    assert {name: g["TargetCount"] for name, g in groups.items()} == {"controller": 1, "login": 1, "a100": 2}
    assert groups["a100"]["LifeCycleConfig"] == {
        "SourceS3Uri": f"s3://{BUCKET}/{PREFIX[:-1]}",
        "OnCreate": "on_create.sh",
    }
    assert groups["a100"]["ExecutionRole"] == outputs()["hyperpod_execution_role_arn"]
    uploaded = objects(moto)
    assert sorted(uploaded) == [
        f"{PREFIX}{name}"
        for name in (
            "bootstrap.sh",
            "node-bundle.tar.gz",
            "node-bundle.tar.gz.sha256",
            "on_create.sh",
            "provisioning_parameters.json",
        )
    ]
    s3 = moto.client("s3", REGION)
    params = json.loads(
        s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}provisioning_parameters.json")["Body"].read()
    )
    assert params == {
        "version": "1.0.0",
        "workload_manager": "slurm",
        "controller_group": "controller",
        "login_group": "login",
        "worker_groups": [{"instance_group_name": "a100", "partition_name": "a100"}],
        "fsx_dns_name": outputs()["fsx_dns_name"],
        "fsx_mountname": "abcdefgh",
        "munge_key_ssm_parameter": "/trainstack/hyperpod/train-hp/munge-key",
        "aws_region": REGION,
    }
    ssm = moto.client("ssm", REGION)
    stored = ssm.get_parameter(Name=params["munge_key_ssm_parameter"])["Parameter"]
    assert stored["Type"] == "SecureString"
    on_create = s3.get_object(Bucket=BUCKET, Key=f"{PREFIX}on_create.sh")["Body"].read()
    assert on_create == (REPO / "playbooks" / "files" / "hyperpod_on_create.sh").read_bytes()

    again = hyperpod(moto, dirs)
    assert again.returncode == 0, again.stdout[-4000:]
    assert changed(again) == 0, again.stdout[-4000:]
    assert objects(moto) == uploaded

    found = listed_inventory(moto, tmp_path)

    def hosts(group: str) -> list[str]:
        return sorted(found.get(group, {}).get("hosts", []))

    assert len(hosts("cluster_train_hp_head")) == 1
    assert len(hosts("cluster_train_hp_login")) == 1
    assert hosts("cluster_train_hp_compute") == hosts("cluster_train_hp_queue_a100")
    assert len(hosts("cluster_train_hp_compute")) == 2
    assert len(found["_meta"]["hostvars"]) == 4

    gone = hyperpod(moto, dirs, "-e", "hyperpod_cluster_state=absent")
    assert gone.returncode == 0, gone.stdout[-4000:]
    assert clusters(moto) == []
    assert objects(moto) == uploaded  # the lifecycle files stay
    assert ssm.describe_parameters()["Parameters"] == []  # the munge key does not
