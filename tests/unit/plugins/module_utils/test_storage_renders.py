"""Every renderer carries the spec's storage defaults (module_utils/cluster/storage.py) for the launch.

ParallelCluster's configuration tags the cluster (and so every instance) with them, and says where its own
file system links S3; Batch's job definitions, which are Batch's launch, give a test case that takes
``data`` the cluster's data directory. Each other target carries them where the ec2_cluster inventory reads
them back: PCS and HyperPod on the cluster (read through their List calls), EKS and Batch on the instances
(the launch template's and the compute environment's instance tags); every request checked against
botocore's model. The golden of every module's render
(tests/unit/plugins/modules/fixtures/cluster_module_renders.json) holds them too.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import (
    batch_render,
    botocore_model,
    cluster_spec,
    eks_render,
    hyperpod_render,
    pcluster_render,
    pcs_render,
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


# ---------------------------------------------------------------- each target, where they are read back

# A spec whose storage keys are all given: the linked directory and the checkpoint directory are not defaults.
STORAGE_KEYS = {
    "fsx_lustre": {
        "deployment_type": "PERSISTENT_2",
        "storage_capacity_gib": 1200,
        "data_repository_path": "s3://example-data/tokens/",
        "data_repository_file_system_path": "/datasets",
    },
    "checkpoint_dir": "/fsx/ckpt",
}
STORED = {DATA: "/fsx/datasets", CHECKPOINTS: "/fsx/ckpt"}


def with_storage(path: Any) -> dict[str, Any]:
    raw = yaml.safe_load(path.read_text())
    return cluster_spec.normalise({**raw, "shared_storage": STORAGE_KEYS}, path.stem)


def storage_of(tags: Any) -> dict[str, str]:
    """The storage tags of a boto3 tag list or map."""
    pairs = tags.items() if isinstance(tags, dict) else ((t["Key"], t["Value"]) for t in tags)
    return {key: value for key, value in pairs if key in (DATA, CHECKPOINTS)}


def test_pcs_carries_them_on_the_cluster_the_inventory_reads_back():
    """PCS's nodes carry only PCS's own tags (their launch template is the caller's), so the cluster's tags
    are where the inventory reads them (ListTagsForResource); its node groups and queues carry them too."""
    from tests.unit.plugins.module_utils.test_pcs_render import FOUNDATION as PCS_FOUNDATION
    from tests.unit.plugins.module_utils.test_pcs_render import SHARED_TEMPLATE, own_templates

    spec = with_storage(EXAMPLE_SPECS["p4d"])
    requests = pcs_render.render(spec, PCS_FOUNDATION, AMI, SHARED_TEMPLATE, own_templates(spec))
    pcs_render.validate(requests)
    model = botocore_model.service_model("pcs")
    assert botocore_model.request_problems(model, "CreateCluster", requests["cluster"]) == ""
    assert storage_of(requests["cluster"]["tags"]) == STORED
    for request in requests["node_groups"] + requests["queues"]:
        assert storage_of(request["tags"]) == STORED


def test_hyperpod_carries_them_on_the_cluster_the_inventory_reads_back():
    """HyperPod's nodes are not EC2 instances of the account: CreateCluster's Tags are read back
    (ListTags)."""
    from tests.unit.plugins.module_utils.test_hyperpod_render import FOUNDATION as HP_FOUNDATION
    from tests.unit.plugins.module_utils.test_hyperpod_render import HYPERPOD_SPEC

    request = hyperpod_render.render(with_storage(HYPERPOD_SPEC), HP_FOUNDATION)["cluster"]
    assert hyperpod_render.request_problems("CreateCluster", request) == ""
    assert storage_of(request["Tags"]) == STORED


def test_eks_puts_them_on_the_instances_through_the_launch_template():
    """A node group's own tags stay on the node group (EKS's model: "Tags don't propagate"); the launch
    template's instance TagSpecifications are what EC2 writes on every node, where the inventory reads
    them."""
    from tests.unit.plugins.module_utils.test_eks_render import FOUNDATION as EKS_FOUNDATION
    from tests.unit.plugins.module_utils.test_eks_render import SPEC as EKS_SPEC

    requests = eks_render.render(with_storage(EKS_SPEC), EKS_FOUNDATION, AMI)
    eks_render.validate(requests)
    ec2 = botocore_model.service_model("ec2")
    assert requests["launch_templates"]
    for template in requests["launch_templates"]:
        assert botocore_model.request_problems(ec2, "CreateLaunchTemplate", template) == ""
        (instance,) = template["LaunchTemplateData"]["TagSpecifications"]
        assert instance["ResourceType"] == "instance"
        assert {t["Key"]: t["Value"] for t in instance["Tags"]} == STORED


def test_batch_puts_them_on_the_instances_through_the_compute_environment():
    """computeResources.tags are applied to the EC2 instances Batch launches (Batch's model); the job
    definitions, Batch's launch, give a test case that takes data the data directory."""
    spec = with_storage(REPO / "inventories" / "aws" / "batch" / "train-batch.yml")
    requests = batch_render.render(
        spec,
        BATCH_FOUNDATION,
        AMI,
        vcpus={"p4d.24xlarge": 96},
        image="123456789012.dkr.ecr.us-east-1.amazonaws.com/trainstack:test",
        test_cases=("pytorch/fsdp",),
        testcases_dir=REPO / "testcases",
    )
    batch_render.validate(requests)
    batch = botocore_model.service_model("batch")
    for environment in requests["compute_environments"]:
        assert botocore_model.request_problems(batch, "CreateComputeEnvironment", environment) == ""
        assert storage_of(environment["computeResources"]["tags"]) == STORED
    (definition,) = requests["job_definitions"]
    assert (
        "--data=/fsx/datasets "
        in definition["nodeProperties"]["nodeRangeProperties"][0]["container"]["command"][2]
    )
