"""module_utils/cluster/eks_render.py and launch_template.py: the EKS and EC2 requests of a cluster spec.

Each rendered request is validated against botocore's own EKS and EC2 models (required members, types, enums,
patterns, maxima); what EKS itself answers beyond its model is the moto tests' and AWS's.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.catalog import instance_catalog
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import (
    botocore_model,
    cluster_spec,
    eks_render,
)

from tests.support import REPO
from tests.unit.plugins.cluster_examples import AMI, EXAMPLE_SPECS

pytestmark = pytest.mark.cluster

SPEC = REPO / "inventories" / "aws" / "eks" / "train-eks.yml"
FOUNDATION: dict[str, Any] = {
    "subnet_public": "subnet-0a0a0a0a0a0a0a0a0",
    "subnet_private": "subnet-0b0b0b0b0b0b0b0b0",
    "security_group": "sg-0c0c0c0c0c0c0c0c0",
    "cluster_role": "arn:aws:iam::123456789012:role/trainstack-train-eks-cluster",
    "node_role": "arn:aws:iam::123456789012:role/trainstack-train-eks-node",
    "placement_group": "trainstack-train-eks",
}


def spec(**changes: Any) -> dict[str, Any]:
    raw = yaml.safe_load(SPEC.read_text())
    raw.update(changes)
    return cluster_spec.normalise(raw, "train-eks")


def refusal(data: dict[str, Any], foundation: dict[str, Any] | None = None, ami: str | None = AMI) -> str:
    with pytest.raises(eks_render.EksRenderError) as caught:
        eks_render.render(data, FOUNDATION if foundation is None else foundation, ami)
    return "\n".join(caught.value.problems)


def test_example_renders_and_every_request_passes_the_models() -> None:
    requests = eks_render.render(spec(), FOUNDATION, AMI)
    eks_render.validate(requests)
    cluster = requests["cluster"]
    assert cluster["name"] == "train-eks"
    assert cluster["version"] == "1.34"  # the stack's kubernetes component
    assert cluster["roleArn"] == FOUNDATION["cluster_role"]
    assert cluster["resourcesVpcConfig"]["subnetIds"] == [
        FOUNDATION["subnet_private"],
        FOUNDATION["subnet_public"],
    ]


def test_p5_launch_template_has_the_catalogs_32_efa_interfaces() -> None:
    (template,) = eks_render.render(spec(), FOUNDATION, AMI)["launch_templates"]
    data = template["LaunchTemplateData"]
    assert template["LaunchTemplateName"] == "trainstack-eks-train-eks-h100"
    assert data["ImageId"] == AMI
    cards = data["NetworkInterfaces"]
    assert len(cards) == instance_catalog.default().get("p5.48xlarge").efa_interfaces == 32
    assert [c["NetworkCardIndex"] for c in cards] == list(range(32))
    assert [c["DeviceIndex"] for c in cards] == [0] + [1] * 31
    assert {c["InterfaceType"] for c in cards} == {"efa"}
    assert all(c["Groups"] == [FOUNDATION["security_group"]] for c in cards)
    assert data["Placement"] == {"GroupName": FOUNDATION["placement_group"]}


def test_p4d_queue_gets_four_interfaces_and_no_efa_queue_a_security_group() -> None:
    data = spec(queues=[{"name": "a100", "instance_type": "p4d.24xlarge", "max_count": 2}])
    assert (
        len(
            eks_render.render(data, FOUNDATION, AMI)["launch_templates"][0]["LaunchTemplateData"][
                "NetworkInterfaces"
            ]
        )
        == 4
    )
    plain = spec(queues=[{"name": "l40s", "instance_type": "g6e.48xlarge", "max_count": 1, "efa": False}])
    data = eks_render.render(plain, FOUNDATION, AMI)["launch_templates"][0]["LaunchTemplateData"]
    assert "NetworkInterfaces" not in data
    assert data["SecurityGroupIds"] == [FOUNDATION["security_group"]]


def test_node_group_of_a_gpu_queue() -> None:
    (group,) = eks_render.render(spec(), FOUNDATION, AMI)["node_groups"]
    assert group["nodegroupName"] == "h100"
    assert group["instanceTypes"] == ["p5.48xlarge"]
    assert group["scalingConfig"] == {"minSize": 0, "maxSize": 2, "desiredSize": 0}
    assert group["subnets"] == [FOUNDATION["subnet_private"]]
    assert group["nodeRole"] == FOUNDATION["node_role"]
    assert group["launchTemplate"] == {"name": "trainstack-eks-train-eks-h100", "version": "1"}
    assert group["capacityType"] == "ON_DEMAND"
    assert group["labels"]["nvidia.com/gpu.present"] == "true"
    assert group["labels"]["vpc.amazonaws.com/efa.present"] == "true"
    assert group["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert "amiType" not in group  # a launch template with an ImageId takes none


def test_capacity_block_queue_targets_its_reservation() -> None:
    data = spec(
        queues=[
            {
                "name": "block",
                "instance_type": "p5.48xlarge",
                "min_count": 2,
                "max_count": 2,
                "capacity_type": "capacity_block",
                "capacity_reservation_id": "cr-0123456789abcdef0",
            }
        ]
    )
    requests = eks_render.render(data, FOUNDATION, AMI)
    eks_render.validate(requests)
    template = requests["launch_templates"][0]["LaunchTemplateData"]
    assert template["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    target = template["CapacityReservationSpecification"]["CapacityReservationTarget"]
    assert target == {"CapacityReservationId": "cr-0123456789abcdef0"}
    assert requests["node_groups"][0]["capacityType"] == "CAPACITY_BLOCK"


def test_user_data_is_nodeadm_config_with_the_clusters_endpoint_labels_and_taints() -> None:
    group = eks_render.render(spec(), FOUNDATION, AMI)["node_groups"][0]
    cluster = {
        "name": "train-eks",
        "endpoint": "https://ABC.gr7.us-west-2.eks.amazonaws.com",
        "certificateAuthority": {"data": "Q0EK"},
        "kubernetesNetworkConfig": {"serviceIpv4Cidr": "172.20.0.0/16"},
    }
    text = base64.b64decode(eks_render.node_user_data(cluster, group)).decode()
    assert "Content-Type: application/node.eks.aws" in text
    body = yaml.safe_load(text.split("Content-Type: application/node.eks.aws\n\n", 1)[1].split("\n--//--")[0])
    assert body["kind"] == "NodeConfig"
    assert body["spec"]["cluster"] == {
        "name": "train-eks",
        "apiServerEndpoint": cluster["endpoint"],
        "certificateAuthority": "Q0EK",
        "cidr": "172.20.0.0/16",
    }
    flags = body["spec"]["kubelet"]["flags"]
    assert "--register-with-taints=nvidia.com/gpu=true:NoSchedule" in flags
    assert any(f.startswith("--node-labels=") and "nvidia.com/gpu.present=true" in f for f in flags)


def test_not_rendered_names_the_slurm_only_keys() -> None:
    lines = eks_render.render(spec(), FOUNDATION, AMI)["not_rendered"]
    assert any(line.startswith("head_node.instance_type:") for line in lines)
    assert any(line.startswith("shared_storage.fsx_lustre:") for line in lines)


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"cluster_role": None}, "foundation.cluster_role: must be an IAM role ARN"),
        ({"node_role": "trainstack-node"}, "foundation.node_role: must be an IAM role ARN"),
        ({"security_group": None}, "foundation.security_group: is required"),
        ({"subnet_private": None}, "foundation.subnet_private: is required"),
        (
            {"placement_group": None},
            "queues[0].placement_group: is true but the foundation has no placement group",
        ),
        (
            {"control_plane_subnets": ["sub-1"]},
            "foundation.control_plane_subnets[0]: 'sub-1' is not a subnet id",
        ),
        ({"bucket": "x"}, "foundation.bucket: not a known key"),
    ],
)
def test_foundation_refusals_name_the_key(change: dict[str, Any], key: str) -> None:
    foundation = {k: v for k, v in {**FOUNDATION, **change}.items() if v is not None}
    assert key in refusal(spec(), foundation)


def test_image_refusals_name_the_key() -> None:
    ubuntu = spec(image={"ami_id": AMI, "os": "ubuntu-22.04", "stack": "ts-2026.10"})
    assert "image.os: EKS nodes boot the eks-gpu image" in refusal(ubuntu)
    assert "image.tags: the AMI is found by its tags" in refusal(spec(), ami=None)
    assert "ami_id: 'ami-x' is not an AMI id" in refusal(spec(), ami="ami-x")


def test_every_example_spec_on_al2023_renders_valid_requests() -> None:
    for name, path in EXAMPLE_SPECS.items():
        raw = yaml.safe_load(path.read_text())
        raw["image"] = {"ami_id": AMI, "os": "amzn-2023", "stack": raw["image"]["stack"]}
        data = cluster_spec.normalise(raw, name)
        foundation = {
            **FOUNDATION,
            **({"subnet_public": None} if data["network"]["vpc"] == "existing" else {}),
        }
        eks_render.validate(eks_render.render(data, {k: v for k, v in foundation.items() if v}, AMI))


def test_the_model_check_refuses_what_botocore_refuses() -> None:
    requests = eks_render.render(spec(), FOUNDATION, AMI)
    broken = copy.deepcopy(requests)
    broken["node_groups"][0]["capacityType"] = "RESERVED"
    with pytest.raises(eks_render.EksRequestError, match=r"CreateNodegroup \(node group h100\).*RESERVED"):
        eks_render.validate(broken)
    broken = copy.deepcopy(requests)
    del broken["cluster"]["roleArn"]
    with pytest.raises(eks_render.EksRequestError, match=r"CreateCluster.*roleArn"):
        eks_render.validate(broken)
    broken = copy.deepcopy(requests)
    broken["launch_templates"][0]["LaunchTemplateData"]["NetworkInterfaces"][0]["DeviceIndex"] = "0"
    with pytest.raises(eks_render.EksRequestError, match="CreateLaunchTemplate"):
        eks_render.validate(broken)
    model = botocore_model.service_model("eks")
    assert "CAPACITY_BLOCK" in model.shape_for("CapacityTypes").enum
