"""trainstack.cluster.eks_cluster, run in process against a real moto server (one for this module's tests).

moto (5.2.5) implements EKS's CreateCluster, CreateNodegroup, Describe*, ListNodegroups and Delete* and EC2's
launch templates; its clusters and node groups are ACTIVE at once, and it refuses to delete a cluster that
still has node groups, as EKS does. So creation in order, a second run that sends nothing, and deletion in
order run for real here; how long EKS takes, and whether a node of our AMI joins, need AWS.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from ansible_collections.amazon.aws.plugins.module_utils.modules import AnsibleAWSModule
from ansible_collections.trainstack.cluster.plugins.modules import eks_cluster

from tests.support import REPO, MotoServer, start_moto

pytestmark = [pytest.mark.cluster, pytest.mark.moto]

SPEC = str(REPO / "inventories" / "aws" / "eks" / "train-eks.yml")
REGION = "us-west-2"
FOUNDATION = {
    "subnet_public": "subnet-0a0a0a0a0a0a0a0a0",
    "subnet_private": "subnet-0b0b0b0b0b0b0b0b0",
    "security_group": "sg-0c0c0c0c0c0c0c0c0",
    "cluster_role": "arn:aws:iam::123456789012:role/trainstack-train-eks-cluster",
    "node_role": "arn:aws:iam::123456789012:role/trainstack-train-eks-node",
    "placement_group": "trainstack-train-eks",
}
AMI = "ami-0d0d0d0d0d0d0d0d0"
ARGS = {"path": SPEC, "foundation": FOUNDATION, "ami_id": AMI, "poll_interval": 1, "wait_timeout": 60}
TEMPLATE = "trainstack-eks-train-eks-h100"


@pytest.fixture
def run_module(capsys: pytest.CaptureFixture[str]):
    from ansible.module_utils.testing import patch_module_args

    def run(**args: Any) -> dict[str, Any]:
        capsys.readouterr()
        with patch_module_args(args), pytest.raises(SystemExit):
            eks_cluster.main()
        return json.loads(capsys.readouterr().out)

    return run


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = start_moto()
    yield server
    server.stop()


def moto_args(moto: MotoServer, **changes: Any) -> dict[str, Any]:
    return {**ARGS, "endpoint_url": moto.url, "access_key": "testing", "secret_key": "testing", **changes}


def held(moto: MotoServer) -> tuple[list[str], list[str]]:
    clusters = moto.client("eks", REGION).list_clusters()["clusters"]
    templates = [
        t["LaunchTemplateName"]
        for t in moto.client("ec2", REGION).describe_launch_templates()["LaunchTemplates"]
    ]
    return clusters, templates


def test_render_only_asks_for_no_client(run_module, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(AnsibleAWSModule, "client", lambda *_a, **_k: pytest.fail("client asked for"))
    res = run_module(**ARGS, render_only=True)
    assert not res.get("failed"), res
    assert [g["nodegroupName"] for g in res["requests"]["node_groups"]] == ["h100"]
    assert len(res["requests"]["launch_templates"][0]["LaunchTemplateData"]["NetworkInterfaces"]) == 32


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"wait_timeout": 0}, "wait_timeout: must be more than 0 seconds"),
        ({"poll_interval": -1}, "poll_interval: must be more than 0 seconds"),
        (
            {"foundation": {**FOUNDATION, "cluster_role": "eks-role"}},
            "foundation.cluster_role: must be an IAM role ARN",
        ),
        ({"ami_id": "ami-nothex"}, "ami_id: 'ami-nothex' is not an AMI id"),
        (
            {"path": str(REPO / "inventories" / "aws" / "clusters" / "p4d.yml")},
            "image.os: EKS nodes boot the eks-gpu",
        ),
    ],
)
def test_bad_input_fails_before_any_call_and_moto_holds_nothing(
    run_module, moto: MotoServer, args: dict[str, Any], message: str
) -> None:
    res = run_module(**moto_args(moto, **args))
    assert res["failed"] and message in res["msg"], res
    assert held(moto) == ([], [])


def test_create_again_unchanged_then_delete_against_moto(run_module, moto: MotoServer) -> None:
    eks = moto.client("eks", REGION)
    ahead = run_module(**moto_args(moto, _ansible_check_mode=True))
    assert ahead["changed"] and ahead["created"] == [
        "cluster train-eks",
        f"launch template {TEMPLATE}",
        "node group h100",
    ]
    assert held(moto) == ([], [])  # check mode made nothing

    made = run_module(**moto_args(moto))
    assert not made.get("failed"), made
    assert made["changed"] and made["created"] == ahead["created"]
    assert made["cluster"]["status"] == "ACTIVE"
    assert made["progress"][-1].endswith("node group h100 ACTIVE")
    cluster = eks.describe_cluster(name="train-eks")["cluster"]
    assert (cluster["version"], cluster["roleArn"]) == ("1.34", FOUNDATION["cluster_role"])
    group = eks.describe_nodegroup(clusterName="train-eks", nodegroupName="h100")["nodegroup"]
    assert group["instanceTypes"] == ["p5.48xlarge"]
    assert group["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert group["launchTemplate"]["name"] == TEMPLATE
    ec2 = moto.client("ec2", REGION)
    version = ec2.describe_launch_template_versions(LaunchTemplateName=TEMPLATE)["LaunchTemplateVersions"][0]
    data = version["LaunchTemplateData"]
    assert data["ImageId"] == AMI
    assert len(data["NetworkInterfaces"]) == 32
    user_data = base64.b64decode(data["UserData"]).decode()
    assert f"apiServerEndpoint: {cluster['endpoint']}" in user_data

    again = run_module(**moto_args(moto))
    assert not again.get("failed"), again
    assert (again["changed"], again["created"]) == (False, [])

    gone_ahead = run_module(**moto_args(moto, state="absent", _ansible_check_mode=True))
    assert gone_ahead["changed"] and held(moto) == (["train-eks"], [TEMPLATE])
    gone = run_module(**moto_args(moto, state="absent"))
    assert not gone.get("failed"), gone
    assert gone["deleted"] == ["node group h100", "cluster train-eks", f"launch template {TEMPLATE}"]
    assert held(moto) == ([], [])
    assert run_module(**moto_args(moto, state="absent"))["changed"] is False


def test_existing_node_group_of_other_counts_is_reported_not_changed(run_module, moto: MotoServer) -> None:
    assert not run_module(**moto_args(moto)).get("failed")
    eks = moto.client("eks", REGION)
    eks.update_nodegroup_config(
        clusterName="train-eks",
        nodegroupName="h100",
        scalingConfig={"minSize": 0, "maxSize": 5, "desiredSize": 0},
    )
    again = run_module(**moto_args(moto))
    assert again["changed"] is False
    assert any("node group h100: scalingConfig" in w for w in again["warnings"]), again
    assert not run_module(**moto_args(moto, state="absent")).get("failed")
    assert held(moto) == ([], [])


def test_a_request_the_model_refuses_fails_before_any_client(
    run_module, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The module validates what the renderer returns: a node group request botocore's EKS model refuses (an
    unknown capacity type) fails naming the operation, and no client is asked for."""
    render = eks_cluster.render

    def broken(*args: Any, **kwargs: Any) -> dict[str, Any]:
        requests = render(*args, **kwargs)
        requests["node_groups"][0]["capacityType"] = "RESERVED"
        return requests

    monkeypatch.setattr(eks_cluster, "render", broken)
    monkeypatch.setattr(AnsibleAWSModule, "client", lambda *_a, **_k: pytest.fail("client asked for"))
    res = run_module(**ARGS)
    assert res["failed"] and res["operation"] == "CreateNodegroup", res
    assert "RESERVED" in res["msg"]
