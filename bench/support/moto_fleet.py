"""Builds stand-in clusters in moto through boto3, the way the real services tag and register them.

moto has no AWS PCS backend and no ParallelCluster: both are represented by EC2 instances carrying the tags
those services write (which is also how the plugin finds them on real AWS). HyperPod clusters are created
through moto's SageMaker create_cluster. The inventory plugin's tests and its benchmark (bench/inventory)
build their fleets with these.
"""

from __future__ import annotations

import os
from typing import Any

from bench.support.lab import REPO, VENV_BIN

CREDS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def plain(value: Any) -> Any:
    """ansible-inventory (2.19) marks untrusted strings as {"__ansible_unsafe": ...}; compare the text."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def clean_aws_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for ansible-inventory: no host AWS config, no instance metadata, the collection on path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "ANSIBLE_"))}
    env.update(
        {
            "AWS_CONFIG_FILE": "/nonexistent/aws-config",
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
            "AWS_EC2_METADATA_DISABLED": "true",
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".cache" / "collections"),
            "ANSIBLE_INVENTORY_ENABLED": "trainstack.cluster.ec2_cluster,amazon.aws.aws_ec2",
            "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true",
            "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "true",
            "ANSIBLE_NOCOLOR": "1",
            "PATH": f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}",
        }
    )
    env.update(extra or {})
    return env


def image_id(ec2: Any) -> str:
    return ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]


def tag_spec(tags: dict[str, str]) -> list[dict[str, Any]]:
    return [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]


def run(
    ec2: Any, ami: str, count: int, itype: str, tags: dict[str, str], zone: str | None = None
) -> list[dict]:
    kwargs: dict[str, Any] = {}
    if zone:
        kwargs["Placement"] = {"AvailabilityZone": zone}
    answer = ec2.run_instances(
        ImageId=ami,
        MinCount=count,
        MaxCount=count,
        InstanceType=itype,
        TagSpecifications=tag_spec(tags),
        **kwargs,
    )
    return answer["Instances"]


def parallelcluster(
    ec2: Any,
    ami: str,
    name: str,
    queues: dict[str, tuple[str, str, int]],
    head_type: str = "c5.2xlarge",
    login: int = 0,
    zone: str | None = None,
) -> dict[str, list[dict]]:
    """One ParallelCluster: head node, optional login nodes, and per queue (resource, type, count)."""
    base = {"parallelcluster:cluster-name": name, "parallelcluster:version": "3.13.0"}
    made = {"head": run(ec2, ami, 1, head_type, {**base, "parallelcluster:node-type": "HeadNode"}, zone)}
    if login:
        made["login"] = run(
            ec2, ami, login, "c5.xlarge", {**base, "parallelcluster:node-type": "LoginNode"}, zone
        )
    for queue, (resource, itype, count) in queues.items():
        tags = {
            **base,
            "parallelcluster:node-type": "Compute",
            "parallelcluster:queue-name": queue,
            "parallelcluster:compute-resource-name": resource,
        }
        made[queue] = run(ec2, ami, count, itype, tags, zone)
    return made


def pcs_cluster(
    ec2: Any, ami: str, cluster_id: str, groups: dict[str, tuple[str, int]]
) -> dict[str, list[dict]]:
    """PCS stand-in: instances with the `aws:pcs:` tags PCS writes (moto accepts the reserved prefix)."""
    return {
        group: run(
            ec2, ami, count, itype, {"aws:pcs:cluster-id": cluster_id, "aws:pcs:compute-node-group-id": group}
        )
        for group, (itype, count) in groups.items()
    }


def hyperpod_cluster(sagemaker: Any, name: str, groups: dict[str, tuple[str, int]]) -> str:
    """HyperPod cluster in moto's SageMaker; ThreadsPerCore given, since moto 5.2.5 answers 500 without it."""
    answer = sagemaker.create_cluster(
        ClusterName=name,
        InstanceGroups=[
            {
                "InstanceCount": count,
                "InstanceGroupName": group,
                "InstanceType": itype,
                "LifeCycleConfig": {
                    "SourceS3Uri": "s3://sagemaker-lifecycle/hyperpod/",
                    "OnCreate": "on_create.sh",
                },
                "ExecutionRole": "arn:aws:iam::123456789012:role/hyperpod-exec",
                "ThreadsPerCore": 1,
            }
            for group, (itype, count) in groups.items()
        ],
    )
    return answer["ClusterArn"]
