# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The EC2 launch template a queue's instances boot from: our AMI, EFA interfaces, placement, capacity.

Why a module of its own: an EKS managed node group and an AWS Batch compute environment both take our AMI and
a queue's fabric (every EFA interface of the instance type, the cluster placement group, a capacity
reservation) only through an EC2 launch template, and both must ask for the same thing. The number of EFA
interfaces is the instance catalog's (stacks/instance_types.yml), never a constant: a p5.48xlarge has 32
network cards, a p4d.24xlarge 4, and an instance launched with fewer interfaces than cards runs NCCL over a
fraction of its fabric without any error.

Pure functions: a CreateLaunchTemplate request (boto3 keyword arguments) in, nothing sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.catalog import instance_catalog

# EC2 launch template names: 3 to 128 characters of letters, digits and ( ) . - / _ (the EC2 model).
NAME_CHARACTERS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789()./-_")


def efa_interfaces(count: int, security_group: str) -> list[dict[str, Any]]:
    """One EFA interface per network card: card 0 carries the primary interface (device 0), every other card
    one more EFA interface (device 1), as EC2 wants for instances with several network cards."""
    return [
        {
            "NetworkCardIndex": card,
            "DeviceIndex": 0 if card == 0 else 1,
            "InterfaceType": "efa",
            "Groups": [security_group],
            "DeleteOnTermination": True,
        }
        for card in range(count)
    ]


def template_name(cluster: str, queue: str, kind: str) -> str:
    """trainstack-<kind>-<cluster>-<queue>: unique per cluster and queue, and found again by name."""
    return f"trainstack-{kind}-{cluster}-{queue}"


def template_data(
    queue: Mapping[str, Any],
    itype: instance_catalog.InstanceType,
    *,
    ami: str,
    security_group: str,
    placement_group: str | None,
) -> dict[str, Any]:
    """LaunchTemplateData of one queue. Without EFA the node group's (or environment's) security groups apply,
    so the template names none; with EFA the interfaces carry the security group."""
    data: dict[str, Any] = {"ImageId": ami}
    if queue["efa"]:
        data["NetworkInterfaces"] = efa_interfaces(itype.efa_interfaces, security_group)
    else:
        data["SecurityGroupIds"] = [security_group]
    if queue["placement_group"] and placement_group:
        data["Placement"] = {"GroupName": placement_group}
    reservation = queue.get("capacity_reservation_id")
    if reservation:
        data["CapacityReservationSpecification"] = {
            "CapacityReservationTarget": {"CapacityReservationId": reservation}
        }
    if queue["capacity_type"] == "capacity_block":
        data["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    data["MetadataOptions"] = {"HttpTokens": "required", "HttpPutResponseHopLimit": 2}
    return data


def request(
    name: str,
    data: Mapping[str, Any],
    tags: Mapping[str, str],
    instance_tags: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """CreateLaunchTemplate, tagged like the cluster's other resources.

    ``instance_tags`` go into the template's own TagSpecifications, which EC2 applies to every instance
    launched from it: the one way a service that tags only its own resource (an EKS node group's tags stay
    on the node group) gets tags onto its instances, where the ec2_cluster inventory reads them."""
    data = dict(data)
    if instance_tags:
        data["TagSpecifications"] = [
            {
                "ResourceType": "instance",
                "Tags": [{"Key": k, "Value": v} for k, v in sorted(instance_tags.items())],
            }
        ]
    return {
        "LaunchTemplateName": name,
        "LaunchTemplateData": data,
        "TagSpecifications": [
            {
                "ResourceType": "launch-template",
                "Tags": [{"Key": k, "Value": v} for k, v in sorted(tags.items())],
            }
        ],
    }


def name_problems(where: str, name: str) -> list[str]:
    """The EC2 model's rule for a template name, checked before anything is sent."""
    bad = sorted(set(name) - NAME_CHARACTERS)
    if not 3 <= len(name) <= 128 or bad:
        return [
            f"{where}: the launch template name {name!r} must be 3 to 128 letters, digits and ( ) . - / _ "
            f"(EC2 CreateLaunchTemplate)"
        ]
    return []
