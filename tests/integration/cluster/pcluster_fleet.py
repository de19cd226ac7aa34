"""ParallelCluster clusters as moto EC2 instances, at addresses of our choosing, and the ec2_cluster inventory
source that finds them: how the launch tests meet the inventory plugin.

moto has no ParallelCluster: a cluster is its instances, tagged as ParallelCluster tags them (the tags the
plugin reads on AWS too). Each instance is started on its own with the address it must have, in one subnet,
so a head node's PrivateIpAddress can be a lab node's address and the hosts the plugin finds are reachable.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support import MOTO_KEYS, MotoServer, ansible_env

REGION = "us-east-1"
ZONE = "us-east-1a"
# The lab's bridge network: a moto subnet of the same range gives instances the lab nodes' addresses.
LAB_SUBNET = "10.77.0.0/24"
PCLUSTER_VERSION = "3.16.1"


@dataclass
class Cluster:
    """A ParallelCluster: its head node's address and, per queue, its compute nodes' addresses."""

    name: str
    head: str
    queues: dict[str, list[str]] = field(default_factory=dict)


def _tags(cluster: str, node_type: str, queue: str = "") -> list[dict[str, Any]]:
    """The instance tags ParallelCluster 3 writes (what the plugin groups by)."""
    tags = {
        "parallelcluster:cluster-name": cluster,
        "parallelcluster:version": PCLUSTER_VERSION,
        "parallelcluster:node-type": node_type,
        "Name": "HeadNode" if node_type == "HeadNode" else "Compute",
    }
    if queue:
        tags["parallelcluster:queue-name"] = queue
        tags["parallelcluster:compute-resource-name"] = f"{queue}-cr"
    return [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]


def launch_clusters(moto: MotoServer, clusters: list[Cluster]) -> dict[str, str]:
    """Start every node in one subnet of LAB_SUBNET, one run_instances per address; returns address ->
    instance id."""
    ec2 = moto.client("ec2", REGION)
    vpc = ec2.create_vpc(CidrBlock="10.77.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=LAB_SUBNET, AvailabilityZone=ZONE)["Subnet"]["SubnetId"]
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    made: dict[str, str] = {}

    def start(address: str, instance_type: str, tags: list[dict[str, Any]]) -> None:
        answer = ec2.run_instances(
            ImageId=image,
            MinCount=1,
            MaxCount=1,
            InstanceType=instance_type,
            SubnetId=subnet,
            PrivateIpAddress=address,
            TagSpecifications=tags,
        )
        made[address] = answer["Instances"][0]["InstanceId"]

    for cluster in clusters:
        start(cluster.head, "m7i.2xlarge", _tags(cluster.name, "HeadNode"))
        for queue, addresses in cluster.queues.items():
            for address in addresses:
                start(address, "g6e.xlarge", _tags(cluster.name, "Compute", queue))
    return made


def write_inventory(directory: Path, endpoint: str, hostvars: dict[str, Any]) -> Path:
    """An ec2_cluster source that reads moto through the plugin's own endpoint option, with ``hostvars`` set
    on every host through compose (each value a Jinja literal)."""
    source = {
        "plugin": "trainstack.cluster.ec2_cluster",
        "regions": [REGION],
        "cluster_kinds": ["parallelcluster"],
        "endpoint_url": endpoint,
        "compose": {key: json.dumps(value) for key, value in hostvars.items()},
    }
    path = directory / "pcluster.ec2_cluster.yml"
    path.write_text(yaml.safe_dump(source, sort_keys=False))
    return path


def inventory_env() -> dict[str, str]:
    """ansible-* with moto's test keys and no host AWS configuration; no AWS_ENDPOINT_URL, so that only the
    inventory source's endpoint_url can lead the plugin to moto."""
    env = {k: v for k, v in ansible_env().items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE="/nonexistent/aws-config",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent/aws-credentials",
        AWS_EC2_METADATA_DISABLED="true",
        **MOTO_KEYS,
    )
    return env


def lab_hostvars(repo: Path) -> dict[str, Any]:
    """How inventories/local reaches the lab's nodes and launches on them (its all.vars, written by lab-up,
    and the launch settings of its group_vars), with the wheelhouse as an absolute path."""
    hosts = yaml.safe_load((repo / "inventories" / "local" / "hosts.yml").read_text())
    group_vars = yaml.safe_load((repo / "inventories" / "local" / "group_vars" / "all.yml").read_text())
    wanted = ("ansible_host_key_checking", "ansible_ssh_common_args", "training_job_instance_type")
    return {
        **hosts["all"]["vars"],
        **{key: group_vars[key] for key in wanted},
        "training_job_wheelhouse": os.fspath(repo / ".cache" / "wheelhouse"),
    }


def lab_addresses(repo: Path) -> tuple[str, list[str]]:
    """The lab's head node address and its compute nodes' addresses, from inventories/local/hosts.yml."""
    lab = yaml.safe_load((repo / "inventories" / "local" / "hosts.yml").read_text())["all"]["children"]["lab"]
    (head,) = lab["children"]["head"]["hosts"].values()
    computes = lab["children"]["compute"]["hosts"].values()
    return head["ansible_host"], [node["ansible_host"] for node in computes]
