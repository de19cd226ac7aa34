"""A spec'd cluster's storage defaults reach the launch on every target that has hosts, read back the way each
target exposes them (moto in server mode, one server for this module).

- EKS: the launch template eks_render makes is created in moto's EC2 and nodes are launched from it with the
  tags EKS writes on a managed node group's instances; the inventory's ``eks`` kind gives them
  ``cluster_storage``, and launch_training with the kubernetes launcher (which launches from the controller)
  and ``-e cluster=<name>`` renders a PyTorchJob whose ``--data`` is the cluster's.
- HyperPod: the CreateCluster request hyperpod_render makes is sent to moto's SageMaker; the inventory reads
  the cluster's tags (ListTags) and the head's ``cluster_storage`` feeds the plan.
- PCS: moto has no PCS API. Its nodes are moto instances carrying PCS's own tags (as for the other inventory
  tests), and the PCS calls (ListClusters, ListTagsForResource) are answered by botocore's Stubber on a real
  PCS client, which checks each call's parameters and answer against botocore's PCS model; the inventory's
  AWS layer runs in process, with EC2 from moto.

The plan step is the action plugin's (with_cluster_storage) and the launch plan's, on the host
launch_training picks (cluster_head). Batch's launch is its job definition, which carries the data directory
(tests/unit/plugins/module_utils/test_storage_renders.py); it has no launch host to read.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from botocore.stub import Stubber

from bench.support import moto_fleet
from tests.support import REPO, VENV_BIN, MotoServer, playbook, start_moto

# The collection as this checkout (as the unit tests' conftest makes it importable), before what imports it.
if str(REPO / ".cache" / "collections") not in sys.path:
    sys.path.insert(0, str(REPO / ".cache" / "collections"))

from ansible_collections.trainstack.cluster.plugins.action.training_job_plan import (
    with_cluster_storage,
)
from ansible_collections.trainstack.cluster.plugins.filter.cluster import cluster_head
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import (
    eks_render,
    hyperpod_render,
    pcs_render,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.inventory import (
    ec2_cluster_aws as aws,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.inventory import (
    ec2_cluster_model as model,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.launch import plan

from tests.unit.plugins.module_utils.test_launch_plan import CATALOG, manifest, request
from tests.unit.plugins.module_utils.test_storage_renders import with_storage

pytestmark = pytest.mark.moto

REGION = "us-east-1"
# What with_storage's spec keys give (test_storage_renders.py): a linked directory and a checkpoint directory.
STORAGE = {"data_dir": "/fsx/datasets", "checkpoint_dir": "/fsx/ckpt"}


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    """A server of this module's own: the shared fleet's tests expect exactly their clusters."""
    server = start_moto()
    yield server
    server.stop()


def inventory(runner: Any, kinds: list[str], **options: Any) -> dict[str, Any]:
    body = yaml.safe_dump(
        {
            "plugin": "trainstack.cluster.ec2_cluster",
            "regions": [REGION],
            "endpoint_url": "@ENDPOINT@",
            "cluster_kinds": kinds,
            **options,
        }
    )
    return runner.listing(body)


def planned_on(listing: dict[str, Any], cluster: str, host: str | None = None) -> dict[str, Any]:
    """The launch plan of pytorch/fsdp on the host launch_training picks (or ``host``), its storage taken as
    the action plugin takes it."""
    groups = {name: body.get("hosts", []) for name, body in listing.items() if isinstance(body, dict)}
    host = host or cluster_head(groups, cluster=cluster)["host"]
    task_vars = {**listing["_meta"]["hostvars"].get(host, {}), "cluster": cluster}
    req = with_cluster_storage(request("pytorch/fsdp", training_job_name="run1"), task_vars)
    return plan.launch_plan(req, manifest("pytorch/fsdp"), CATALOG, {})


def assert_the_clusters_storage(found: dict[str, Any]) -> None:
    assert found["arguments"]["data"] == STORAGE["data_dir"]
    assert found["checkpoints"] == f"{STORAGE['checkpoint_dir']}/run1"


# ---------------------------------------------------------------- EKS: the launch template's instance tags

EKS_SPEC = REPO / "inventories" / "aws" / "eks" / "train-eks.yml"
EKS_FOUNDATION = {
    "subnet_public": "subnet-0a0a0a0a0a0a0a0a0",
    "subnet_private": "subnet-0b0b0b0b0b0b0b0b0",
    "security_group": "sg-0c0c0c0c0c0c0c0c0",
    "cluster_role": "arn:aws:iam::123456789012:role/trainstack-train-eks-cluster",
    "node_role": "arn:aws:iam::123456789012:role/trainstack-train-eks-node",
    "placement_group": "trainstack-train-eks",
}


@pytest.fixture(scope="module")
def eks_nodes(moto: MotoServer) -> list[dict[str, Any]]:
    """Two nodes of train-eks's first node group, launched from the launch template eks_render makes, with
    the tags EKS writes on a managed node group's instances."""
    ec2 = moto.client("ec2", REGION)
    requests = eks_render.render(with_storage(EKS_SPEC), EKS_FOUNDATION, moto_fleet.image_id(ec2))
    eks_render.validate(requests)
    template, group = requests["launch_templates"][0], requests["node_groups"][0]
    ec2.create_launch_template(**template)
    return ec2.run_instances(
        LaunchTemplate={"LaunchTemplateName": template["LaunchTemplateName"], "Version": "1"},
        InstanceType=group["instanceTypes"][0],
        MinCount=2,
        MaxCount=2,
        TagSpecifications=moto_fleet.tag_spec(
            {"eks:cluster-name": group["clusterName"], "eks:nodegroup-name": group["nodegroupName"]}
        ),
    )["Instances"]


def test_eks_nodes_carry_the_storage_to_the_inventory(moto, eks_nodes, make_runner):
    listing = inventory(make_runner(moto.url), ["eks"])
    hosts = sorted(listing["cluster_train_eks"]["hosts"])
    assert hosts == sorted(i["PrivateDnsName"] for i in eks_nodes)
    for host in hosts:
        variables = listing["_meta"]["hostvars"][host]
        assert (variables["cluster_kind"], variables["cluster_node_role"]) == ("eks", "compute")
        assert variables["cluster_storage"] == STORAGE
    assert_the_clusters_storage(planned_on(listing, "train-eks", host=hosts[0]))


def test_eks_launch_from_the_controller_gives_the_pytorchjob_the_clusters_data(
    moto, eks_nodes, make_runner, tmp_path: Path
):
    """launch_training as an EKS cluster's users run it: the kubernetes launcher on this machine, the cluster
    named, no path typed; the rendered PyTorchJob's workers read the cluster's data directory."""
    source = make_runner(moto.url).write(
        yaml.safe_dump(
            {
                "plugin": "trainstack.cluster.ec2_cluster",
                "regions": [REGION],
                "endpoint_url": "@ENDPOINT@",
                "cluster_kinds": ["eks"],
            }
        ),
        name="eks",
    )
    results = tmp_path / "results"
    done = playbook(
        "launch_training",
        "-i",
        str(source),
        *("-e", "cluster=train-eks"),
        *("-e", f"ansible_python_interpreter={VENV_BIN / 'python'}"),
        *("-e", "training_job_launcher=kubernetes", "-e", "training_job_testcase=pytorch/fsdp"),
        *("-e", "training_job_nodes=2", "-e", "training_job_instance_type=p5.48xlarge"),
        *("-e", "training_job_k8s_image=registry.example/trainstack/pytorch:test"),
        *("-e", f"training_job_results_dir={results}"),
        env=moto_fleet.clean_aws_env(moto_fleet.KEYS),
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    (rendered,) = results.glob("*/pytorchjob.yaml")
    job = yaml.safe_load(rendered.read_text())
    command = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"]
    assert "--data=/fsx/datasets" in command


# ---------------------------------------------------------------- HyperPod: the cluster's tags (ListTags)

HYPERPOD_SPEC = REPO / "inventories" / "aws" / "hyperpod" / "train-hp.yml"
HYPERPOD_FOUNDATION = {
    "subnet_private": "subnet-0b0b0b0b0b0b0b0b0",
    "security_group": "sg-0c0c0c0c0c0c0c0c0",
    "execution_role": "arn:aws:iam::123456789012:role/trainstack-train-hp-hyperpod",
    "lifecycle_s3_uri": "s3://sagemaker-trainstack-train-hp/hyperpod/train-hp",
    "fsx_dns_name": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
    "fsx_mount_name": "abcdefgh",
}


def test_hyperpod_clusters_tags_reach_its_nodes_and_the_plan(moto, make_runner):
    request_ = hyperpod_render.render(with_storage(HYPERPOD_SPEC), HYPERPOD_FOUNDATION)["cluster"]
    hyperpod_render.validate("CreateCluster", request_)
    moto.client("sagemaker", REGION).create_cluster(**request_)
    listing = inventory(
        make_runner(moto.url),
        ["hyperpod"],
        hyperpod_head_groups=["controller"],
        hyperpod_login_groups=["login"],
        hyperpod_ssm=False,
    )
    hosts = listing["cluster_train_hp"]["hosts"]
    assert len(hosts) == 4  # controller, login, two a100 workers
    for host in hosts:
        assert listing["_meta"]["hostvars"][host]["cluster_storage"] == STORAGE
    assert_the_clusters_storage(planned_on(listing, "train-hp"))


# -------------------------------------------------------------- PCS: the cluster's tags (ListTagsForResource)

PCS_ID = "pcs_0a1b2c3d4e"
PCS_ARN = f"arn:aws:pcs:{REGION}:123456789012:cluster/{PCS_ID}"


def pcs_fetch(moto: MotoServer, tags: dict[str, str] | None) -> tuple[list[model.Node], list[str]]:
    """The inventory's AWS layer on one region: EC2 from moto, PCS answered by the Stubber (``tags`` is the
    cluster's ListTagsForResource answer; None: the call is denied)."""
    settings = aws.AwsSettings(
        access_key=moto_fleet.KEYS["AWS_ACCESS_KEY_ID"],
        secret_key=moto_fleet.KEYS["AWS_SECRET_ACCESS_KEY"],
        endpoint_url=moto.url,
        max_attempts=1,
    )
    session = aws.make_session(settings, REGION)
    flt = model.SourceFilter(kinds=("pcs",), pcs_login_node_groups=frozenset({"login"}))
    fetcher = aws.Fetcher(session, settings, flt, ["pending", "running"], 1000, aws.HyperPodSettings())
    pcs = aws.make_client(session, "pcs", REGION, settings)
    summary = {
        "name": "train-p4d",
        "id": PCS_ID,
        "arn": PCS_ARN,
        "createdAt": "2026-12-01T00:00:00Z",
        "modifiedAt": "2026-12-01T00:00:00Z",
        "status": "ACTIVE",
    }
    with Stubber(pcs) as stub:
        stub.add_response("list_clusters", {"clusters": [summary]}, {})
        if tags is None:
            stub.add_client_error(
                "list_tags_for_resource",
                "AccessDeniedException",
                "not allowed",
                403,
                {"resourceArn": PCS_ARN},
            )
        else:
            stub.add_response("list_tags_for_resource", {"tags": tags}, {"resourceArn": PCS_ARN})
        fetcher._clients[("pcs", REGION)] = pcs
        result = fetcher.fetch([REGION])
        stub.assert_no_pending_responses()
    return result.nodes, result.warnings


@pytest.fixture(scope="module")
def pcs_cluster_tags(moto: MotoServer) -> dict[str, str]:
    """The tags pcs_render puts on CreateCluster, and the nodes of that cluster as PCS tags them."""
    from tests.unit.plugins.module_utils.test_pcs_render import FOUNDATION, SHARED_TEMPLATE, own_templates

    spec = with_storage(REPO / "inventories" / "aws" / "clusters" / "p4d.yml")
    requests = pcs_render.render(
        spec, FOUNDATION, "ami-0d0d0d0d0d0d0d0d0", SHARED_TEMPLATE, own_templates(spec)
    )
    pcs_render.validate(requests)
    ec2 = moto.client("ec2", REGION)
    moto_fleet.pcs_cluster(
        ec2, moto_fleet.image_id(ec2), PCS_ID, {"login": ("c5.large", 1), "a100": ("p4d.24xlarge", 2)}
    )
    return requests["cluster"]["tags"]


def test_pcs_clusters_tags_reach_its_nodes_and_the_plan(moto, pcs_cluster_tags):
    nodes, warnings = pcs_fetch(moto, pcs_cluster_tags)
    assert warnings == []
    assert len(nodes) == 3 and all(node.storage == STORAGE for node in nodes)
    built = model.build_plan(nodes, {}, ["instance-id"])
    groups = dict(built.groups)
    login = cluster_head(groups, cluster=PCS_ID)["host"]
    assert built.hostvars[login]["cluster_node_role"] == "login"
    req = with_cluster_storage(request("pytorch/fsdp", training_job_name="run1"), built.hostvars[login])
    assert_the_clusters_storage(plan.launch_plan(req, manifest("pytorch/fsdp"), CATALOG, {}))


def test_a_denied_pcs_tag_read_is_a_warning_and_leaves_the_storage_unset(moto, pcs_cluster_tags):
    nodes, warnings = pcs_fetch(moto, None)
    assert len(nodes) == 3 and all(node.storage is None for node in nodes)
    (warning,) = warnings
    assert (
        f"pcs list_tags_for_resource {PCS_ID} in {REGION}: access denied (AccessDeniedException)" in warning
    )
    assert "cluster_storage" in warning
