"""The cluster_spec and pcluster_config modules, run in process: the spec's checks, the rendered
ParallelCluster 3 keys for each example spec, and the file written only when its content changes."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from tests.unit.plugins.cluster_examples import AMI, EXAMPLE_SPECS
from tests.unit.plugins.cluster_examples import FOUNDATION as SHARED_FOUNDATION

pytestmark = pytest.mark.cluster

FOUNDATION = {
    **SHARED_FOUNDATION,
    "placement_group": "train-pg",
    "database": {
        "uri": "slurmdb.internal:3306",
        "user_name": "slurm",
        "password_secret_arn": "arn:aws:secretsmanager:us-west-2:123456789012:secret:slurmdb-AbCdEf",
    },
}
BUNDLE_ARGS = [
    "--bundle",
    f"s3://trainstack-test-cluster/trainstack/bundles/{'ab' * 32}.tar.gz",
    "--sha256",
    "ab" * 32,
]


@pytest.fixture
def run_module(capsys: pytest.CaptureFixture[str]):
    """Run a module's main() in this process with the given arguments; returns its JSON result."""
    from ansible.module_utils.testing import patch_module_args
    from ansible_collections.trainstack.cluster.plugins.modules import cluster_spec, pcluster_config

    modules = {"cluster_spec": cluster_spec, "pcluster_config": pcluster_config}

    def run(name: str, **args: Any) -> dict[str, Any]:
        capsys.readouterr()
        with patch_module_args(args), pytest.raises(SystemExit):
            modules[name].main()
        return json.loads(capsys.readouterr().out)

    return run


def rendered(run_module, name: str, **extra: Any) -> dict[str, Any]:
    res = run_module(
        "pcluster_config", path=str(EXAMPLE_SPECS[name]), foundation=FOUNDATION, ami_id=AMI, **extra
    )
    assert not res.get("failed"), res
    return res["config"]


# ---------------------------------------------------------------- cluster_spec


@pytest.mark.parametrize("name", sorted(EXAMPLE_SPECS))
def test_cluster_spec_module_returns_the_normalised_example(run_module, name):
    res = run_module("cluster_spec", path=str(EXAMPLE_SPECS[name]), _ansible_check_mode=True)
    assert not res.get("failed"), res
    assert res["changed"] is False
    assert all("efa" in q and "min_count" in q for q in res["spec"]["queues"])


def test_cluster_spec_module_fails_naming_file_key_and_rule(run_module, tmp_path):
    spec = yaml.safe_load(EXAMPLE_SPECS["p4d"].read_text())
    spec["queues"][0]["instance_type"] = "g5g.16xlarge"
    spec["shared_storage"]["fsx_lustre"]["storage_capacity_gib"] = 3000
    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump(spec))
    res = run_module("cluster_spec", path=str(path))
    assert res["failed"]
    assert f"{path}: queues[0].efa: g5g.16xlarge has no EFA interface" in res["msg"]
    assert f"{path}: shared_storage.fsx_lustre.storage_capacity_gib: 3000 GiB" in res["msg"]
    assert len(res["problems"]) >= 2


# ---------------------------------------------------------------- rendering of each example


def test_p4d_renders_a_new_vpc_scratch_fsx_with_import_path(run_module):
    config = rendered(run_module, "p4d")
    assert config["Region"] == "us-east-1"
    assert config["Image"] == {"Os": "ubuntu2204", "CustomAmi": AMI}
    head = config["HeadNode"]
    assert head["Networking"] == {
        "SubnetId": FOUNDATION["subnet_public"],
        "AdditionalSecurityGroups": [FOUNDATION["security_group"]],
    }
    assert head["CustomActions"]["OnNodeConfigured"] == {
        "Script": "s3://trainstack-test-cluster/trainstack/bootstrap.sh",
        "Args": ["head", *BUNDLE_ARGS],
    }
    assert head["Iam"] == {
        "S3Access": [{"BucketName": "trainstack-test-cluster", "EnableWriteAccess": False}]
    }
    queue = config["Scheduling"]["SlurmQueues"][0]
    assert queue["CapacityType"] == "ONDEMAND"
    assert queue["Networking"]["SubnetIds"] == [FOUNDATION["subnet_private"]]
    assert queue["Networking"]["PlacementGroup"] == {"Enabled": True, "Name": "train-pg"}
    assert queue["ComputeResources"] == [
        {
            "Name": "p4d-24xlarge",
            "InstanceType": "p4d.24xlarge",
            "MinCount": 0,
            "MaxCount": 4,
            "Efa": {"Enabled": True},
        }
    ]
    assert queue["CustomActions"]["OnNodeConfigured"]["Args"] == ["compute", *BUNDLE_ARGS]
    # resilience defaults: ParallelCluster's GPU check on, our node_health prolog installed by the head node
    assert queue["HealthChecks"] == {"Gpu": {"Enabled": True}}
    assert head["CustomActions"]["OnNodeConfigured"]["Args"] == ["head", *BUNDLE_ARGS]
    assert "SlurmSettings" not in config["Scheduling"]
    assert config["SharedStorage"] == [
        {
            "Name": "fsx",
            "StorageType": "FsxLustre",
            "MountDir": "/fsx",
            "FsxLustreSettings": {
                "StorageCapacity": 4800,
                "DeploymentType": "SCRATCH_2",
                "ImportPath": "s3://example-training-data/datasets/",
            },
        }
    ]
    assert config["Monitoring"]["Logs"]["CloudWatch"]["Enabled"] is True
    assert "LoginNodes" not in config


def test_p5_renders_existing_subnets_capacity_block_login_efs_and_accounting(run_module):
    config = rendered(run_module, "p5")
    spec = yaml.safe_load(EXAMPLE_SPECS["p5"].read_text())
    assert config["HeadNode"]["Networking"]["SubnetId"] == spec["network"]["public_subnet_id"]
    assert config["HeadNode"]["Ssh"] == {"KeyName": "training"}
    pool = config["LoginNodes"]["Pools"][0]
    assert (pool["InstanceType"], pool["Count"], pool["Networking"]["SubnetIds"]) == (
        "m7i.2xlarge",
        2,
        [spec["network"]["public_subnet_id"]],
    )
    assert "Ssh" not in pool  # ParallelCluster 3.15+ refuses KeyName on login pools
    assert pool["CustomActions"]["OnNodeConfigured"]["Args"] == ["login", *BUNDLE_ARGS]
    block, debug = config["Scheduling"]["SlurmQueues"]
    assert block["CapacityType"] == "CAPACITY_BLOCK"
    resource = block["ComputeResources"][0]
    assert (resource["MinCount"], resource["MaxCount"]) == (2, 2)
    assert resource["CapacityReservationTarget"] == {"CapacityReservationId": "cr-0123456789abcdef0"}
    assert block["Networking"]["SubnetIds"] == [spec["network"]["private_subnet_id"]]
    assert "PlacementGroup" not in debug["Networking"]
    assert debug["ComputeResources"][0]["Efa"] == {"Enabled": True}
    assert config["Scheduling"]["SlurmSettings"]["Database"] == {
        "Uri": "slurmdb.internal:3306",
        "UserName": "slurm",
        "PasswordSecretArn": FOUNDATION["database"]["password_secret_arn"],
    }
    fsx, home = config["SharedStorage"]
    assert fsx["FsxLustreSettings"] == {
        "StorageCapacity": 9600,
        "DeploymentType": "PERSISTENT_2",
        "PerUnitStorageThroughput": 250,
        "DataRepositoryAssociations": [
            {
                "Name": "data",
                "DataRepositoryPath": "s3://example-training-data/checkpoints",
                "FileSystemPath": "/",
            }
        ],
    }
    assert home == {
        "Name": "home",
        "StorageType": "Efs",
        "MountDir": "/home",
        "EfsSettings": {"Encrypted": True},
    }


def test_p6_b200_renders_an_on_demand_capacity_reservation(run_module):
    config = rendered(run_module, "p6-b200")
    queue = config["Scheduling"]["SlurmQueues"][0]
    assert queue["CapacityType"] == "ONDEMAND"
    assert queue["ComputeResources"][0]["CapacityReservationTarget"] == {
        "CapacityReservationId": "cr-0fedcba9876543210"
    }
    assert queue["ComputeResources"][0]["InstanceType"] == "p6-b200.48xlarge"
    assert config["SharedStorage"][0]["FsxLustreSettings"]["PerUnitStorageThroughput"] == 500
    assert config["Image"]["CustomAmi"] == AMI  # the caller's id wins over the spec's


def test_g6e_renders_spot_alinux_and_monitoring_off(run_module):
    config = rendered(run_module, "g6e")
    assert config["Image"]["Os"] == "alinux2023"
    queue = config["Scheduling"]["SlurmQueues"][0]
    assert queue["CapacityType"] == "SPOT"
    assert "CapacityReservationTarget" not in queue["ComputeResources"][0]
    assert config["Monitoring"] == {
        "DetailedMonitoring": False,
        "Logs": {"CloudWatch": {"Enabled": False}},
        "Dashboards": {"CloudWatch": {"Enabled": False}},
    }
    assert config["SharedStorage"][0]["FsxLustreSettings"] == {
        "StorageCapacity": 3600,
        "DeploymentType": "SCRATCH_1",
    }
    assert config["LoginNodes"]["Pools"][0]["Count"] == 1


def test_instance_profile_replaces_s3_access_everywhere(run_module):
    foundation = {**FOUNDATION, "instance_profile": "arn:aws:iam::123456789012:instance-profile/train"}
    res = run_module("pcluster_config", path=str(EXAMPLE_SPECS["g6e"]), foundation=foundation, ami_id=AMI)
    config = res["config"]
    iams = [
        config["HeadNode"]["Iam"],
        config["LoginNodes"]["Pools"][0]["Iam"],
        config["Scheduling"]["SlurmQueues"][0]["Iam"],
    ]
    assert iams == [{"InstanceProfile": foundation["instance_profile"]}] * 3


def test_the_foundations_file_system_is_mounted_instead_of_a_new_one(run_module):
    """cluster_foundation makes the FSx of a spec (it outlives the cluster); ParallelCluster must mount that
    one by id, not create a second from the spec's settings."""
    foundation = {**FOUNDATION, "fsx_file_system_id": "fs-0123456789abcdef0"}
    res = run_module("pcluster_config", path=str(EXAMPLE_SPECS["p5"]), foundation=foundation, ami_id=AMI)
    (fsx,) = [s for s in res["config"]["SharedStorage"] if s["StorageType"] == "FsxLustre"]
    assert fsx["FsxLustreSettings"] == {"FileSystemId": "fs-0123456789abcdef0"}
    assert fsx["MountDir"] == rendered(run_module, "p5")["SharedStorage"][0]["MountDir"]


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("name", "foundation", "extra", "fragment"),
    [
        (
            "p4d",
            {k: v for k, v in FOUNDATION.items() if k != "subnet_private"},
            {},
            "foundation.subnet_private is required",
        ),
        (
            "p5",
            {k: v for k, v in FOUNDATION.items() if k != "database"},
            {},
            "foundation.database.uri is required",
        ),
        ("p4d", FOUNDATION, {"ami_id": None}, "image.tags: the AMI is found by its tags in AWS"),
        ("p4d", {k: v for k, v in FOUNDATION.items() if k != "bucket"}, {}, "bucket"),
        ("p4d", {**FOUNDATION, "subnet": "subnet-0a0a0a0a0a0a0a0a0"}, {}, "subnet"),
        ("p4d", {k: v for k, v in FOUNDATION.items() if k != "bundle_sha256"}, {}, "bundle_sha256"),
        (
            "p4d",
            {**FOUNDATION, "bundle_sha256": "AB" * 32},
            {},
            "foundation.bundle_sha256 must be the 64 lowercase hex digits",
        ),
    ],
    ids=[
        "no-private-subnet",
        "no-database",
        "ami-by-tags-unresolved",
        "no-bucket",
        "unknown-foundation-key",
        "no-bundle-sha256",
        "bundle-sha256-not-lowercase-hex",
    ],
)
def test_render_refuses_naming_the_missing_input(run_module, tmp_path, name, foundation, extra, fragment):
    dest = tmp_path / "cluster.yaml"
    args = {
        "path": str(EXAMPLE_SPECS[name]),
        "foundation": foundation,
        "ami_id": AMI,
        "dest": str(dest),
        **extra,
    }
    res = run_module("pcluster_config", **args)
    assert res["failed"]
    assert fragment in res["msg"]
    assert not dest.exists()


def test_render_refuses_to_keep_unhealthy_nodes_and_turns_health_checks_off(run_module):
    spec = yaml.safe_load(EXAMPLE_SPECS["p4d"].read_text())
    spec["resilience"] = {"replace_unhealthy_nodes": False}
    res = run_module("pcluster_config", spec=spec, foundation=FOUNDATION, ami_id=AMI)
    assert res["failed"]
    assert "resilience.replace_unhealthy_nodes: ParallelCluster always replaces" in res["msg"]
    spec["resilience"] = {"health_checks": False}
    config = run_module("pcluster_config", spec=spec, foundation=FOUNDATION, ami_id=AMI)["config"]
    assert config["Scheduling"]["SlurmQueues"][0]["HealthChecks"] == {"Gpu": {"Enabled": False}}
    assert config["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Args"] == [
        "head",
        *BUNDLE_ARGS,
        "-e",
        "node_bootstrap_health_hooks=false",
    ]


def test_render_refuses_a_bad_spec_given_as_data(run_module):
    spec = yaml.safe_load(EXAMPLE_SPECS["p4d"].read_text())
    spec["queues"][0]["efa_enabled"] = True
    res = run_module("pcluster_config", spec=spec, foundation=FOUNDATION)
    assert res["failed"]
    assert "spec: queues[0].efa_enabled: unknown key" in res["msg"]


# ---------------------------------------------------------------- the file


def test_dest_is_written_once_then_unchanged_and_check_mode_writes_nothing(run_module, tmp_path):
    dest = tmp_path / "train-p5.yaml"
    args = {"path": str(EXAMPLE_SPECS["p5"]), "foundation": FOUNDATION, "ami_id": AMI, "dest": str(dest)}
    checked = run_module("pcluster_config", _ansible_check_mode=True, **args)
    assert checked["changed"] is True and not dest.exists()
    first = run_module("pcluster_config", **args)
    assert first["changed"] is True
    assert yaml.safe_load(dest.read_text()) == first["config"]
    assert dest.read_text() == first["text"]
    second = run_module("pcluster_config", **args)
    assert second["changed"] is False
    changed = run_module("pcluster_config", **{**args, "ami_id": "ami-0e0e0e0e0e0e0e0e0"})
    assert changed["changed"] is True


def test_spec_given_as_data_renders_like_the_file(run_module):
    from_file = run_module("pcluster_config", path=str(EXAMPLE_SPECS["p5"]), foundation=FOUNDATION)
    spec = copy.deepcopy(from_file["spec"])
    from_data = run_module("pcluster_config", spec=spec, foundation=FOUNDATION)
    assert from_data["config"] == from_file["config"]


def test_rendered_text_is_yaml_of_the_config(run_module):
    res = run_module("pcluster_config", path=str(EXAMPLE_SPECS["p6-b200"]), foundation=FOUNDATION)
    assert res["text"].startswith("---\n")
    assert yaml.safe_load(res["text"]) == res["config"]
