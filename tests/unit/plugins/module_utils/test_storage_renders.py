"""Every renderer carries the spec's storage defaults (module_utils/cluster/storage.py) for the launch.

ParallelCluster's configuration tags the cluster (and so every instance) with them, and says where its own
file system links S3; Batch's job definitions, which are Batch's launch, give a test case that takes
``data`` the cluster's data directory. PCS, HyperPod and EKS carry the same tags in their requests: the
golden of every module's render (tests/unit/plugins/modules/fixtures/cluster_module_renders.json) holds
them, and test_pcs_render.py and test_hyperpod_render.py name them field by field.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import (
    batch_render,
    cluster_spec,
    pcluster_render,
)

from tests.support import REPO
from tests.unit.plugins.cluster_examples import AMI, EXAMPLE_SPECS, FOUNDATION

pytestmark = pytest.mark.cluster

DATA = "trainstack:data-dir"
CHECKPOINTS = "trainstack:checkpoint-dir"


DATABASE = {
    "uri": "slurmdb.internal:3306",
    "user_name": "slurm",
    "password_secret_arn": "arn:aws:secretsmanager:us-west-2:123456789012:secret:slurmdb-AbCdEf",
}


def pcluster_tags(spec: dict[str, Any], **foundation: Any) -> dict[str, str]:
    config = pcluster_render.render(spec, {**FOUNDATION, "database": DATABASE, **foundation}, AMI)
    return {tag["Key"]: tag["Value"] for tag in config["Tags"]}


def test_parallelcluster_tags_the_foundations_linked_directory():
    p4d = cluster_spec.load_file(EXAMPLE_SPECS["p4d"])
    tags = pcluster_tags(p4d, fsx_file_system_id="fs-0123456789abcdef0")
    assert (tags[DATA], tags[CHECKPOINTS]) == ("/fsx/data", "/fsx/trainstack/checkpoints")


def test_parallelclusters_own_file_system_links_at_its_root_unless_the_spec_names_a_directory():
    p4d, p5 = (cluster_spec.load_file(EXAMPLE_SPECS[name]) for name in ("p4d", "p5"))
    assert pcluster_tags(p4d)[DATA] == "/fsx"  # SCRATCH_2: ImportPath imports at the root
    assert pcluster_tags(p5)[DATA] == "/fsx"  # PERSISTENT_2: its association at /
    p5["shared_storage"]["fsx_lustre"]["data_repository_file_system_path"] = "/datasets"
    config = pcluster_render.render(p5, {**FOUNDATION, "database": DATABASE}, AMI)
    (association,) = config["SharedStorage"][0]["FsxLustreSettings"]["DataRepositoryAssociations"]
    assert association["FileSystemPath"] == "/datasets"
    assert pcluster_tags(p5)[DATA] == "/fsx/datasets"


def test_parallelcluster_refuses_a_directory_its_import_path_cannot_honour():
    p4d = cluster_spec.load_file(EXAMPLE_SPECS["p4d"])
    p4d["shared_storage"]["fsx_lustre"]["data_repository_file_system_path"] = "/datasets"
    with pytest.raises(pcluster_render.RenderError, match="data_repository_file_system_path: a SCRATCH_2"):
        pcluster_render.render(p4d, FOUNDATION, AMI)
    assert pcluster_tags(p4d, fsx_file_system_id="fs-0123456789abcdef0")[DATA] == "/fsx/datasets"


def test_a_spec_without_shared_storage_carries_no_storage_tag():
    g6e = copy.deepcopy(cluster_spec.load_file(EXAMPLE_SPECS["g6e"]))
    g6e["shared_storage"] = {"efs_home": False}
    assert set(pcluster_tags(g6e)) == {"trainstack:stack"}


BATCH_FOUNDATION = {
    "subnet_private": "subnet-0b0b0b0b0b0b0b0b0",
    "security_group": "sg-0c0c0c0c0c0c0c0c0",
    "instance_profile": "arn:aws:iam::123456789012:instance-profile/trainstack-node",
    "placement_group": "trainstack-placement",
}


def batch_commands(shared_storage: dict[str, Any] | None) -> dict[str, str]:
    spec = cluster_spec.load_file(REPO / "inventories" / "aws" / "batch" / "train-batch.yml")
    if shared_storage is not None:
        spec = cluster_spec.normalise({**spec, "shared_storage": shared_storage})
    requests = batch_render.render(
        spec,
        BATCH_FOUNDATION,
        AMI,
        vcpus={"p4d.24xlarge": 96},
        image="123456789012.dkr.ecr.us-east-1.amazonaws.com/trainstack:test",
        test_cases=("pytorch/fsdp", "hf/finetune"),
        testcases_dir=REPO / "testcases",
    )
    batch_render.validate(requests)
    return {
        d["jobDefinitionName"]: d["nodeProperties"]["nodeRangeProperties"][0]["container"]["command"][2]
        for d in requests["job_definitions"]
    }


def test_batch_gives_the_data_directory_only_to_a_test_case_that_takes_data():
    linked = {
        "fsx_lustre": {"storage_capacity_gib": 1200, "data_repository_path": "s3://example-data/tokens/"}
    }
    commands = batch_commands(linked)
    fsdp = next(command for name, command in commands.items() if "fsdp" in name)
    finetune = next(command for name, command in commands.items() if "finetune" in name)
    assert "--data=/fsx/data " in fsdp and "--data=synthetic" not in fsdp
    assert "--data" not in finetune
    unlinked = batch_commands(None)
    assert "--data=synthetic " in next(command for name, command in unlinked.items() if "fsdp" in name)
