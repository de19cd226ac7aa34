"""trainstack.cluster.batch_cluster and module_utils/cluster/batch_render.py, in process, on a moto server.

moto (5.2.5) implements Batch's compute environments, job queues and job definitions, and checks what AWS
checks first: the instance profile and service role exist, the subnet and security group exist. The VPC,
subnet, security group, role and profile are made in moto here as the foundation would make them. Running a
job needs AWS (moto runs containers through Docker, which is not used here).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from ansible_collections.trainstack.cluster.plugins.module_utils.catalog import instance_catalog
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import batch_render, cluster_spec
from ansible_collections.trainstack.cluster.plugins.modules import batch_cluster

from tests.support import REPO, MotoServer, start_moto

pytestmark = [pytest.mark.cluster, pytest.mark.moto]

SPEC = str(REPO / "inventories" / "aws" / "batch" / "train-batch.yml")
REGION = "us-east-1"
AMI = "ami-0d0d0d0d0d0d0d0d0"
IMAGE = "registry.example/trainstack:ts-2026.10"
NAMES = ("train-batch-a100-nccl-collectives", "train-batch-a100-pytorch-fsdp")


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = start_moto()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def foundation(moto: MotoServer) -> dict[str, str]:
    """What the foundation makes, in moto: VPC, private subnet, security group, node profile, Batch's role."""
    ec2, iam = moto.client("ec2", REGION), moto.client("iam", REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24", AvailabilityZone="us-east-1a")["Subnet"]
    group = ec2.create_security_group(GroupName="trainstack-efa", Description="efa", VpcId=vpc)["GroupId"]
    trust = json.dumps({"Version": "2012-10-17", "Statement": []})
    iam.create_role(RoleName="trainstack-train-batch-node", AssumeRolePolicyDocument=trust)
    profile = iam.create_instance_profile(InstanceProfileName="trainstack-train-batch-node")[
        "InstanceProfile"
    ]
    iam.add_role_to_instance_profile(
        InstanceProfileName="trainstack-train-batch-node", RoleName="trainstack-train-batch-node"
    )
    service = iam.create_role(RoleName="trainstack-batch-service", AssumeRolePolicyDocument=trust)["Role"][
        "Arn"
    ]
    return {
        "subnet_private": subnet["SubnetId"],
        "security_group": group,
        "instance_profile": profile["Arn"],
        "service_role": service,
    }


@pytest.fixture
def run_module(capsys: pytest.CaptureFixture[str]):
    from ansible.module_utils.testing import patch_module_args

    def run(**args: Any) -> dict[str, Any]:
        capsys.readouterr()
        with patch_module_args(args), pytest.raises(SystemExit):
            batch_cluster.main()
        return json.loads(capsys.readouterr().out)

    return run


def args(moto: MotoServer, foundation: dict[str, str], **changes: Any) -> dict[str, Any]:
    return {
        "path": SPEC,
        "foundation": foundation,
        "ami_id": AMI,
        "image": IMAGE,
        "poll_interval": 1,
        "wait_timeout": 60,
        "endpoint_url": moto.url,
        "access_key": "testing",
        "secret_key": "testing",
        **changes,
    }


def held(moto: MotoServer) -> dict[str, list[str]]:
    batch = moto.client("batch", REGION)
    return {
        "environments": [
            c["computeEnvironmentName"] for c in batch.describe_compute_environments()["computeEnvironments"]
        ],
        "queues": [q["jobQueueName"] for q in batch.describe_job_queues()["jobQueues"]],
        "definitions": [
            d["jobDefinitionName"] for d in batch.describe_job_definitions(status="ACTIVE")["jobDefinitions"]
        ],
        "templates": [
            t["LaunchTemplateName"]
            for t in moto.client("ec2", REGION).describe_launch_templates()["LaunchTemplates"]
        ],
    }


NOTHING = {"environments": [], "queues": [], "definitions": [], "templates": []}


def rendered(foundation: dict[str, str], **changes: Any) -> dict[str, Any]:
    spec = cluster_spec.load_file(SPEC)
    spec.update(changes)
    return batch_render.render(
        spec, foundation, AMI, vcpus={"p4d.24xlarge": 96}, image=IMAGE, testcases_dir=REPO / "testcases"
    )


def test_job_definitions_ask_for_the_catalogs_gpus_and_efa_devices(foundation: dict[str, str]) -> None:
    requests = rendered(foundation)
    batch_render.validate(requests)
    p4d = instance_catalog.default().get("p4d.24xlarge")
    assert [d["jobDefinitionName"] for d in requests["job_definitions"]] == list(NAMES)
    for definition in requests["job_definitions"]:
        assert definition["type"] == "multinode"
        nodes = definition["nodeProperties"]
        assert (nodes["numNodes"], nodes["mainNode"]) == (2, 0)
        container = nodes["nodeRangeProperties"][0]["container"]
        needs = {r["type"]: r["value"] for r in container["resourceRequirements"]}
        assert needs["GPU"] == str(p4d.gpu_count) and needs["VCPU"] == "96"
        assert len(container["linuxParameters"]["devices"]) == p4d.efa_interfaces
        assert f"--nproc-per-node={p4d.gpu_count}" in container["command"][2]
    data = requests["launch_templates"][0]["LaunchTemplateData"]
    assert len(data["NetworkInterfaces"]) == p4d.efa_interfaces
    resources = requests["compute_environments"][0]["computeResources"]
    assert (resources["minvCpus"], resources["maxvCpus"]) == (0, 192)
    assert resources["ec2Configuration"] == [{"imageType": "ECS_AL2023_NVIDIA", "imageIdOverride": AMI}]


def test_the_model_check_refuses_a_wrong_request(foundation: dict[str, str]) -> None:
    broken = copy.deepcopy(rendered(foundation))
    broken["job_definitions"][0]["type"] = "multi-node"
    with pytest.raises(batch_render.BatchRequestError, match="RegisterJobDefinition"):
        batch_render.validate(broken)
    broken = copy.deepcopy(rendered(foundation))
    broken["compute_environments"][0]["computeResources"]["type"] = "EC3"
    with pytest.raises(batch_render.BatchRequestError, match="CreateComputeEnvironment"):
        batch_render.validate(broken)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"foundation": {"security_group": "sg-1"}},
            "foundation.instance_profile: must be an instance profile ARN",
        ),
        ({"test_cases": ["nccl/nothing"]}, "test_cases: 'nccl/nothing' is not a test case"),
        ({"ami_id": "ami-x"}, "ami_id: 'ami-x' is not an AMI id"),
        ({"wait_timeout": 0}, "wait_timeout: must be more than 0 seconds"),
    ],
)
def test_bad_input_fails_before_any_call(run_module, moto, foundation, change, message) -> None:
    res = run_module(**{**args(moto, foundation), **change})
    assert res["failed"] and message in res["msg"], res
    assert held(moto) == NOTHING


def test_create_again_unchanged_then_delete(run_module, moto: MotoServer, foundation: dict[str, str]) -> None:
    ahead = run_module(**args(moto, foundation, _ansible_check_mode=True))
    assert ahead["changed"] and held(moto) == NOTHING
    made = run_module(**args(moto, foundation))
    assert not made.get("failed"), made
    assert (
        made["created"]
        == ahead["created"]
        == [
            "launch template trainstack-batch-train-batch-a100",
            "compute environment train-batch-a100",
            "job queue train-batch-a100",
            *[f"job definition {name}" for name in NAMES],
        ]
    )
    batch = moto.client("batch", REGION)
    (environment,) = batch.describe_compute_environments()["computeEnvironments"]
    assert (
        environment["computeResources"]["launchTemplate"]["launchTemplateName"]
        == "trainstack-batch-train-batch-a100"
    )
    assert environment["computeResources"]["maxvCpus"] == 2 * 96  # moto's and EC2's vCPUs of p4d.24xlarge
    (queue,) = batch.describe_job_queues()["jobQueues"]
    assert made["job_queues"] == {"train-batch-a100": queue["jobQueueArn"]}
    assert sorted(held(moto)["definitions"]) == list(NAMES)

    again = run_module(**args(moto, foundation))
    assert (again["changed"], again["created"]) == (False, []), again

    newer = run_module(**args(moto, foundation, image=IMAGE + "-2"))
    assert newer["created"] == [f"job definition {name}" for name in NAMES]

    gone = run_module(**args(moto, foundation, state="absent"))
    assert not gone.get("failed"), gone
    assert gone["deleted"][:2] == ["job queue train-batch-a100", "compute environment train-batch-a100"]
    assert held(moto) == NOTHING
    assert run_module(**args(moto, foundation, state="absent"))["changed"] is False


def test_a_request_the_model_refuses_fails_before_anything_is_made(
    run_module, moto: MotoServer, foundation: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The module validates what the renderer returns: a job definition botocore's Batch model refuses fails
    naming the operation, and moto holds nothing."""
    render = batch_cluster.render

    def broken(*positional: Any, **kwargs: Any) -> dict[str, Any]:
        requests = render(*positional, **kwargs)
        requests["job_definitions"][0]["type"] = "multi-node"
        return requests

    monkeypatch.setattr(batch_cluster, "render", broken)
    res = run_module(**args(moto, foundation))
    assert res["failed"] and res["operation"] == "RegisterJobDefinition", res
    assert held(moto) == NOTHING
