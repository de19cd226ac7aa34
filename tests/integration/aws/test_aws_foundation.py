"""The AWS foundation of a cluster against a real moto server: create, a second run that changes nothing,
the outputs the ParallelCluster renderer reads, a teardown that removes exactly what carries the cluster's
tag, and bad input that stops before anything is made.

One moto server and one set of playbook runs serve the whole module: each run drives two clusters in
parallel, as inventory hosts (one in a VPC of its own, one in a VPC and bucket that existed before, untagged),
so the module is four playbook runs long.
moto has no placement groups and no FSx data repository associations: those requests are checked against
botocore's model of the API instead (tests/unit/plugins/modules/test_fsx_lustre.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import VENV_BIN, MotoServer, moto_aws_env, run, start_moto

pytestmark = pytest.mark.moto

REGION = "us-east-1"
ZONE = "us-east-1a"
TAG = "trainstack:cluster"
# llm-a: a VPC of its own, FSx (moto has no data repository associations: no link), SSH from one range.
OWN_VPC = {
    "aws_foundation_cluster_name": "llm-a",
    "aws_foundation_region": REGION,
    "aws_foundation_availability_zone": ZONE,
    "aws_foundation_ssh_cidrs": ["203.0.113.0/24"],
    "aws_foundation_fsx_enabled": True,
    "aws_foundation_fsx_storage_capacity": 2400,
    "aws_foundation_fsx_link_bucket": False,
    "aws_foundation_placement_group": False,  # moto has no placement groups
    "aws_foundation_tags": {"team": "ml"},
    # EKS: its cluster role, the EKS node policies and a private subnet in a second zone.
    "aws_foundation_orchestrator": "eks",
}


FOREIGN_ROLE = "trainstack-llm-b-eks-cluster"


@dataclass
class Given:
    """A VPC, subnet and bucket made before the foundation, untagged: the teardown must leave them."""

    vpc_id: str
    subnet_id: str
    bucket: str


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = start_moto(env={"MOTO_IAM_LOAD_MANAGED_POLICIES": "true"})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def given(moto: MotoServer) -> Given:
    ec2 = moto.client("ec2", REGION)
    vpc = ec2.create_vpc(CidrBlock="192.168.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="192.168.1.0/24", AvailabilityZone=ZONE)["Subnet"]
    s3 = moto.client("s3", REGION)
    s3.create_bucket(Bucket="team-datasets")
    s3.put_object(Bucket="team-datasets", Key="corpus/part-0000.jsonl", Body=b"{}\n")
    # A role of the name llm-b's EKS cluster role would have, another cluster's: llm-b is HyperPod and makes
    # none, and its teardown (which looks for every role name) must leave this one.
    moto.client("iam", REGION).create_role(
        RoleName=FOREIGN_ROLE, AssumeRolePolicyDocument="{}", Tags=[{"Key": TAG, "Value": "someone-else"}]
    )
    return Given(vpc, subnet["SubnetId"], "team-datasets")


def given_vars(given: Given) -> dict[str, Any]:
    """llm-b: the given subnet and bucket; no FSx, no placement group; HyperPod."""
    return {
        "aws_foundation_cluster_name": "llm-b",
        "aws_foundation_region": REGION,
        "aws_foundation_availability_zone": ZONE,
        "aws_foundation_vpc_create": False,
        "aws_foundation_private_subnet_id": given.subnet_id,
        "aws_foundation_bucket_create": False,
        "aws_foundation_bucket_name": given.bucket,
        "aws_foundation_placement_group": False,
        # HyperPod: its execution role (the given network gets no second subnet).
        "aws_foundation_orchestrator": "hyperpod",
    }


def playbook(tmp: Path, moto: MotoServer, name: str, clusters: dict[str, dict]) -> dict[str, Any]:
    """Run a collection playbook for several clusters at once, as the playbook documents: each cluster an
    inventory host with its variables, one fork each. Returns the JSON callback's report."""
    hosts = {
        host: {
            **variables,
            "ansible_connection": "local",
            "ansible_python_interpreter": str(VENV_BIN / "python"),
        }
        for host, variables in clusters.items()
    }
    inventory = tmp / f"{name}-{len(list(tmp.glob('*.yml')))}.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"clusters": {"hosts": hosts}}}}))
    env = moto_aws_env(moto.url, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_PIPELINING="true")
    command = [str(VENV_BIN / "ansible-playbook"), f"trainstack.cluster.{name}", "-i", str(inventory)]
    done = run([*command, "-e", "cluster_hosts=clusters", "-f", str(len(hosts))], check=False, env=env)
    result = json.loads(done.stdout)
    result["returncode"] = done.returncode
    return result


def succeeded(result: dict[str, Any]) -> dict[str, Any]:
    failed = {h: s for h, s in result["stats"].items() if s["failures"] or s["unreachable"]}
    assert result["returncode"] == 0 and not failed, json.dumps(host_results(result), indent=1)[-6000:]
    return result


def host_results(result: dict[str, Any]) -> list[tuple[str, str, dict]]:
    """(task name, host, result) of every task run."""
    return [
        (task["task"]["name"], host, outcome)
        for play in result["plays"]
        for task in play["tasks"]
        for host, outcome in task["hosts"].items()
    ]


def outputs(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """aws_foundation_outputs of each cluster (the playbook's last task shows them)."""
    return {
        host: o["aws_foundation_outputs"]
        for task, host, o in host_results(result)
        if "aws_foundation_outputs" in o
    }


def changed_tasks(result: dict[str, Any]) -> list[str]:
    return [f"{host}: {name}" for name, host, outcome in host_results(result) if outcome.get("changed")]


def tagged(moto: MotoServer, cluster: str) -> dict[str, list[str]]:
    """Every resource in moto that carries the cluster's tag, by kind (empty lists when none)."""
    ec2 = moto.client("ec2", REGION)
    by_tag = [{"Name": f"tag:{TAG}", "Values": [cluster]}]
    live = {"Name": "state", "Values": ["pending", "available"]}
    found = {
        "vpcs": [v["VpcId"] for v in ec2.describe_vpcs(Filters=by_tag)["Vpcs"]],
        "subnets": [s["SubnetId"] for s in ec2.describe_subnets(Filters=by_tag)["Subnets"]],
        "security_groups": [
            g["GroupId"] for g in ec2.describe_security_groups(Filters=by_tag)["SecurityGroups"]
        ],
        "route_tables": [r["RouteTableId"] for r in ec2.describe_route_tables(Filters=by_tag)["RouteTables"]],
        "internet_gateways": [
            g["InternetGatewayId"] for g in ec2.describe_internet_gateways(Filters=by_tag)["InternetGateways"]
        ],
        "nat_gateways": [
            n["NatGatewayId"] for n in ec2.describe_nat_gateways(Filters=[*by_tag, live])["NatGateways"]
        ],
        "addresses": [a["AllocationId"] for a in ec2.describe_addresses(Filters=by_tag)["Addresses"]],
        "endpoints": [
            e["VpcEndpointId"]
            for e in ec2.describe_vpc_endpoints(Filters=by_tag)["VpcEndpoints"]
            if e["State"].lower() != "deleted"
        ],
    }
    file_systems = moto.client("fsx", REGION).describe_file_systems()["FileSystems"]
    found["file_systems"] = [
        f["FileSystemId"] for f in file_systems if {"Key": TAG, "Value": cluster} in f["Tags"]
    ]
    iam = moto.client("iam", REGION)
    found["roles"] = [
        r["RoleName"]
        for r in iam.list_roles()["Roles"]
        if {"Key": TAG, "Value": cluster} in iam.list_role_tags(RoleName=r["RoleName"])["Tags"]
    ]
    found["instance_profiles"] = [
        p["InstanceProfileName"]
        for p in iam.list_instance_profiles()["InstanceProfiles"]
        if cluster in p["InstanceProfileName"]
    ]
    found["buckets"] = [
        b["Name"] for b in moto.client("s3", REGION).list_buckets()["Buckets"] if cluster in b["Name"]
    ]
    return found


def vpc_ids(moto: MotoServer) -> set[str]:
    return {v["VpcId"] for v in moto.client("ec2", REGION).describe_vpcs()["Vpcs"]}


# ------------------------------------------------------------------ bad input: refused before any change
# (cluster, variables, the key the refusal names): each a cluster of its own in one run.
BAD = [
    (
        "bad-subnet",
        {"aws_foundation_private_subnet_cidr": "10.1.0.0/24"},
        "aws_foundation_private_subnet_cidr",
    ),
    ("bad-zone", {"aws_foundation_availability_zone": "eu-west-1a"}, "aws_foundation_availability_zone"),
    (
        "bad-fsx",
        {"aws_foundation_fsx_per_unit_storage_throughput": 300},
        "aws_foundation_fsx_per_unit_storage_throughput",
    ),
    ("bad-orchestrator", {"aws_foundation_orchestrator": "kubernetes"}, "aws_foundation_orchestrator"),
    # A data bucket that does not exist: found by the read-only checks, before the VPC and its gateways.
    (
        "bad-bucket",
        {"aws_foundation_bucket_create": False, "aws_foundation_bucket_name": "no-such-team-datasets"},
        "aws_foundation_bucket_name",
    ),
    # The execution role's name is taken by a role of another cluster (made below).
    ("bad-owner", {"aws_foundation_orchestrator": "hyperpod"}, "aws_foundation_cluster_name"),
]
TAKEN_ROLE = "trainstack-bad-owner-hyperpod"


def test_bad_input_is_refused_before_anything_is_made(tmp_path: Path, moto: MotoServer, given: Given) -> None:
    iam = moto.client("iam", REGION)
    iam.create_role(RoleName=TAKEN_ROLE, AssumeRolePolicyDocument="{}", Tags=[{"Key": TAG, "Value": "other"}])
    roles_before = sorted(r["RoleName"] for r in iam.list_roles()["Roles"])
    before = vpc_ids(moto)
    clusters = {
        name: {**OWN_VPC, "aws_foundation_cluster_name": name, **variables} for name, variables, _key in BAD
    }
    result = playbook(tmp_path, moto, "cluster_foundation", clusters)
    assert result["returncode"] != 0
    for name, _variables, key in BAD:
        failed = [o for task, host, o in host_results(result) if host == name and o.get("failed")]
        # A looped assert says which item failed in its results.
        messages = " ".join(str(r.get("msg", "")) for f in failed for r in [f, *f.get("results", [])])
        assert key in messages, (name, messages)
        assert not any(tagged(moto, name).values())
    assert TAKEN_ROLE in messages_of(result, "bad-owner") and "'other'" in messages_of(result, "bad-owner")
    assert vpc_ids(moto) == before
    assert [b["Name"] for b in moto.client("s3", REGION).list_buckets()["Buckets"]] == [given.bucket]
    assert sorted(r["RoleName"] for r in iam.list_roles()["Roles"]) == roles_before
    # The other cluster's role is as it was: no policy attached, none written.
    assert iam.list_attached_role_policies(RoleName=TAKEN_ROLE)["AttachedPolicies"] == []
    assert iam.list_role_policies(RoleName=TAKEN_ROLE)["PolicyNames"] == []
    iam.delete_role(RoleName=TAKEN_ROLE)


def messages_of(result: dict[str, Any], host: str) -> str:
    failed = [o for task, name, o in host_results(result) if name == host and o.get("failed")]
    return " ".join(str(r.get("msg", "")) for f in failed for r in [f, *f.get("results", [])])


# ------------------------------------------------------------------ fsx_lustre on its own
FSX_PLAY = """
- name: fsx_lustre through its life
  hosts: localhost
  connection: local
  gather_facts: false
  module_defaults:
    trainstack.cluster.fsx_lustre: {region: REGION, cluster: fsx-only, name: fsx-only-fsx, subnet_id: SUBNET}
  tasks:
    - {name: planned, trainstack.cluster.fsx_lustre: {}, check_mode: true, register: planned}
    - {name: made, trainstack.cluster.fsx_lustre: {storage_capacity: 2400}, register: made}
    - {name: again, trainstack.cluster.fsx_lustre: {storage_capacity: 2400}, register: again}
    - {name: resized, trainstack.cluster.fsx_lustre: {storage_capacity: 4800}, register: resized}
    - {name: deleted, trainstack.cluster.fsx_lustre: {state: absent}, register: deleted}
    - {name: gone, trainstack.cluster.fsx_lustre: {state: absent}, register: gone}
"""


def test_fsx_lustre_finds_its_file_system_by_tag(tmp_path: Path, moto: MotoServer, given: Given) -> None:
    """Check mode makes nothing; a second run finds the file system by its tags and changes nothing; a
    different size is reported, not applied; absent deletes it, and then has nothing to do."""
    play = tmp_path / "fsx.yml"
    play.write_text(FSX_PLAY.replace("REGION", REGION).replace("SUBNET", given.subnet_id))
    env = moto_aws_env(moto.url, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_PIPELINING="true")
    command = [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", str(play)]
    done = run([*command, "-e", f"ansible_python_interpreter={VENV_BIN / 'python'}"], check=False, env=env)
    steps = {task: outcome for task, host, outcome in host_results(json.loads(done.stdout))}
    assert done.returncode == 0, steps
    fsx = moto.client("fsx", REGION)
    assert steps["planned"]["changed"] and steps["planned"]["file_system_id"] == ""
    assert steps["made"]["changed"] and steps["made"]["file_system"]["tags"] == {
        TAG: "fsx-only",
        "Name": "fsx-only-fsx",
    }
    assert not steps["again"]["changed"]
    assert steps["again"]["file_system_id"] == steps["made"]["file_system_id"]
    assert not steps["resized"]["changed"] and "storage_capacity is 2400, not 4800" in str(steps["resized"])
    assert steps["deleted"]["changed"] and not steps["gone"]["changed"]
    left = [
        f
        for f in fsx.describe_file_systems()["FileSystems"]
        if {"Key": TAG, "Value": "fsx-only"} in f["Tags"]
    ]
    assert left == []


# ------------------------------------------------------------------ create, outputs, second run, teardown
# Each is a full playbook run of two clusters (about 40 s on a 2-core machine): behind the slow marker, run
# by `make test-slow` and `make test-aws`.
@pytest.fixture(scope="module")
def created(tmp_path_factory: pytest.TempPathFactory, moto: MotoServer, given: Given) -> dict[str, Any]:
    clusters = {"llm-a": OWN_VPC, "llm-b": given_vars(given)}
    return succeeded(playbook(tmp_path_factory.mktemp("up"), moto, "cluster_foundation", clusters))


@pytest.mark.slow
def test_outputs_name_what_was_made(moto: MotoServer, given: Given, created: dict[str, Any]) -> None:
    own, shared = outputs(created)["llm-a"], outputs(created)["llm-b"]
    ec2 = moto.client("ec2", REGION)
    subnets = {
        s["SubnetId"]: s
        for s in ec2.describe_subnets(SubnetIds=[own["public_subnet_id"], own["private_subnet_id"]])[
            "Subnets"
        ]
    }
    assert {s["VpcId"] for s in subnets.values()} == {own["vpc_id"]}
    assert {s["AvailabilityZone"] for s in subnets.values()} == {ZONE}
    assert subnets[own["public_subnet_id"]]["MapPublicIpOnLaunch"] is True
    assert subnets[own["private_subnet_id"]]["MapPublicIpOnLaunch"] is False
    for subnet in subnets.values():
        tags = {t["Key"]: t["Value"] for t in subnet["Tags"]}
        assert tags[TAG] == "llm-a" and tags["team"] == "ml" and tags["Name"].startswith("llm-a-")
    # Private subnet: default route through the NAT gateway, which sits in the public subnet.
    private_table = ec2.describe_route_tables(
        Filters=[{"Name": "association.subnet-id", "Values": [own["private_subnet_id"]]}]
    )["RouteTables"][0]
    nat = [
        r.get("NatGatewayId") for r in private_table["Routes"] if r.get("DestinationCidrBlock") == "0.0.0.0/0"
    ]
    assert (
        nat
        and ec2.describe_nat_gateways(NatGatewayIds=nat)["NatGateways"][0]["SubnetId"]
        == own["public_subnet_id"]
    )
    endpoints = ec2.describe_vpc_endpoints(Filters=[{"Name": "vpc-id", "Values": [own["vpc_id"]]}])[
        "VpcEndpoints"
    ]
    assert [e["ServiceName"] for e in endpoints] == [f"com.amazonaws.{REGION}.s3"]
    assert private_table["RouteTableId"] in endpoints[0]["RouteTableIds"]

    group = ec2.describe_security_groups(GroupIds=[own["security_group_id"]])["SecurityGroups"][0]
    self_pair = [{"GroupId": own["security_group_id"], "UserId": group["OwnerId"]}]

    def pairs(rules: list[dict]) -> list[list[dict]]:
        return [
            [{k: p[k] for k in ("GroupId", "UserId")} for p in r["UserIdGroupPairs"]]
            for r in rules
            if r["IpProtocol"] == "-1" and r["UserIdGroupPairs"]
        ]

    assert pairs(group["IpPermissions"]) == [self_pair]
    assert pairs(group["IpPermissionsEgress"]) == [self_pair]
    ssh = [r for r in group["IpPermissions"] if r["IpProtocol"] == "tcp"]
    assert [(r["FromPort"], r["ToPort"], [i["CidrIp"] for i in r["IpRanges"]]) for r in ssh] == [
        (22, 22, ["203.0.113.0/24"])
    ]

    s3 = moto.client("s3", REGION)
    assert own["bucket"] == "trainstack-llm-a-us-east-1"
    rules = s3.get_bucket_encryption(Bucket=own["bucket"])["ServerSideEncryptionConfiguration"]["Rules"]
    assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    assert all(s3.get_public_access_block(Bucket=own["bucket"])["PublicAccessBlockConfiguration"].values())

    iam = moto.client("iam", REGION)
    role = own["instance_role_name"]
    assert role == "trainstack-llm-a-node"
    # On EKS the node role also carries the three policies a managed node group's role needs.
    assert attached_policies(iam, role) == sorted([SSM, *EKS_NODE_POLICIES])
    inline = iam.get_role_policy(RoleName=role, PolicyName="read-cluster-bucket")["PolicyDocument"]
    granted = {(a, s["Resource"]) for s in inline["Statement"] for a in s["Action"]}
    bucket_arn = f"arn:aws:s3:::{own['bucket']}"
    assert granted == {
        ("s3:ListBucket", bucket_arn),
        ("s3:GetBucketLocation", bucket_arn),
        ("s3:GetObject", f"{bucket_arn}/*"),
    }
    profile = iam.get_instance_profile(InstanceProfileName=own["instance_profile_name"])["InstanceProfile"]
    assert profile["Arn"] == own["instance_profile_arn"]
    assert [r["Arn"] for r in profile["Roles"]] == [own["instance_role_arn"]]

    file_system = moto.client("fsx", REGION).describe_file_systems(FileSystemIds=[own["fsx_file_system_id"]])
    file_system = file_system["FileSystems"][0]
    assert file_system["SubnetIds"] == [own["private_subnet_id"]]
    # (moto drops SecurityGroupIds from its answer; the request's are checked against botocore's model.)
    assert file_system["StorageCapacity"] == 2400
    assert file_system["LustreConfiguration"]["PerUnitStorageThroughput"] == 250
    assert own["fsx_dns_name"] == file_system["DNSName"]
    assert own["placement_group"] == ""

    # EKS: a private subnet in a second zone of the VPC, routed like the first; the control plane's role.
    second = ec2.describe_subnets(SubnetIds=[own["second_private_subnet_id"]])["Subnets"][0]
    assert second["VpcId"] == own["vpc_id"] and second["MapPublicIpOnLaunch"] is False
    assert second["AvailabilityZone"] == own["second_availability_zone"] == "us-east-1b"
    second_table = ec2.describe_route_tables(
        Filters=[{"Name": "association.subnet-id", "Values": [second["SubnetId"]]}]
    )["RouteTables"]
    assert [t["RouteTableId"] for t in second_table] == [private_table["RouteTableId"]]
    assert own["orchestrator"] == "eks" and own["eks_node_role_arn"] == own["instance_role_arn"]
    assert own["hyperpod_execution_role_arn"] == ""
    cluster_role = service_role(iam, "trainstack-llm-a-eks-cluster", "eks.amazonaws.com", "llm-a")
    assert cluster_role["Arn"] == own["eks_cluster_role_arn"]
    assert attached_policies(iam, cluster_role["RoleName"]) == [f"{AWS_POLICY}AmazonEKSClusterPolicy"]
    assert iam.list_role_policies(RoleName=cluster_role["RoleName"])["PolicyNames"] == []

    # HyperPod (llm-b): the execution role SageMaker assumes, reading its lifecycle prefix.
    execution = service_role(iam, "trainstack-llm-b-hyperpod", "sagemaker.amazonaws.com", "llm-b")
    assert execution["Arn"] == shared["hyperpod_execution_role_arn"]
    assert attached_policies(iam, execution["RoleName"]) == [
        f"{AWS_POLICY}AmazonSageMakerClusterInstanceRolePolicy"
    ]
    lifecycle = iam.get_role_policy(RoleName=execution["RoleName"], PolicyName="hyperpod-lifecycle")
    statements = {st["Sid"]: st for st in lifecycle["PolicyDocument"]["Statement"]}
    bucket = "arn:aws:s3:::sagemaker-trainstack-llm-b"
    assert statements["ListTheLifecyclePrefix"]["Resource"] == bucket
    assert statements["ReadTheLifecycleScripts"]["Resource"] == f"{bucket}/hyperpod/llm-b/*"
    # The cluster's munge key (hyperpod_cluster writes it): read only, this cluster's only.
    assert statements["ReadTheMungeKey"]["Action"] == ["ssm:GetParameter"]
    assert statements["ReadTheMungeKey"]["Resource"] == (
        f"arn:aws:ssm:{REGION}:*:parameter/trainstack/hyperpod/llm-b/munge-key"
    )
    assert "ec2:CreateNetworkInterface" in statements["NetworkInterfacesInTheClusterVpc"]["Action"]
    assert (
        shared["eks_cluster_role_arn"],
        shared["eks_node_role_arn"],
        shared["second_private_subnet_id"],
    ) == (
        "",
        "",
        "",
    )
    assert attached_policies(iam, shared["instance_role_name"]) == [SSM]
    # Another cluster's role of an EKS name is not llm-b's business.
    assert {"Key": TAG, "Value": "someone-else"} in iam.list_role_tags(RoleName=FOREIGN_ROLE)["Tags"]

    # The second cluster lives in what it was given.
    assert (shared["vpc_id"], shared["private_subnet_id"], shared["bucket"]) == (
        given.vpc_id,
        given.subnet_id,
        given.bucket,
    )
    assert shared["fsx_file_system_id"] == ""


@pytest.mark.slow
def test_second_run_changes_nothing(
    tmp_path: Path, moto: MotoServer, given: Given, created: dict[str, Any]
) -> None:
    again = succeeded(
        playbook(tmp_path, moto, "cluster_foundation", {"llm-a": OWN_VPC, "llm-b": given_vars(given)})
    )
    assert changed_tasks(again) == []
    assert [s["changed"] for s in again["stats"].values()] == [0, 0]
    assert outputs(again) == outputs(created)


@pytest.mark.slow
def test_teardown_removes_what_carries_the_tag_and_nothing_else(
    tmp_path: Path, moto: MotoServer, given: Given, created: dict[str, Any]
) -> None:
    before = vpc_ids(moto)
    clusters = {
        "llm-a": {k: v for k, v in OWN_VPC.items() if k in TEARDOWN_KEYS},
        "llm-b": {k: v for k, v in given_vars(given).items() if k in TEARDOWN_KEYS},
    }
    own = outputs(created)["llm-a"]
    # The cluster's own bucket goes with what is in it.
    moto.client("s3", REGION).put_object(Bucket=own["bucket"], Key="bootstrap/node.sh", Body=b"#!/bin/sh\n")
    succeeded(playbook(tmp_path, moto, "cluster_teardown", clusters))
    for cluster in ("llm-a", "llm-b"):
        left = tagged(moto, cluster)
        assert not any(left.values()), left
    assert vpc_ids(moto) == before - {own["vpc_id"]}
    assert given.vpc_id in vpc_ids(moto)
    ec2 = moto.client("ec2", REGION)
    assert ec2.describe_subnets(SubnetIds=[given.subnet_id])["Subnets"][0]["VpcId"] == given.vpc_id
    # A role of another cluster, with a name the teardown looks for, stays.
    assert moto.client("iam", REGION).get_role(RoleName=FOREIGN_ROLE)["Role"]["RoleName"] == FOREIGN_ROLE
    objects = moto.client("s3", REGION).list_objects_v2(Bucket=given.bucket)["Contents"]
    assert [o["Key"] for o in objects] == ["corpus/part-0000.jsonl"]
    # A teardown that is run again (after an interrupted one, say) finds nothing to do.
    assert changed_tasks(succeeded(playbook(tmp_path, moto, "cluster_teardown", clusters))) == []


@pytest.mark.slow
def test_a_failure_after_creation_names_what_was_made_and_the_teardown(
    tmp_path: Path, moto: MotoServer
) -> None:
    """A step that fails once resources exist (here the placement group, which moto's EC2 does not offer):
    the run fails naming the VPC, security group, bucket and role it made and the teardown playbook, and that
    teardown leaves nothing of the cluster."""
    half = {**OWN_VPC, "aws_foundation_cluster_name": "llm-half", "aws_foundation_placement_group": True}
    result = playbook(tmp_path, moto, "cluster_foundation", {"llm-half": half})
    assert result["returncode"] != 0
    made = tagged(moto, "llm-half")
    message = messages_of(result, "llm-half")
    assert "The foundation of llm-half stopped at 'Create the cluster placement group'" in message, message
    assert f"VPC {made['vpcs'][0]}" in message, (made, message)
    assert (
        "security group sg-" in message
        and "bucket trainstack-llm-half-" in message
        and "IAM role " in message
    ), message
    assert "trainstack.cluster.cluster_teardown" in message, message
    # The placement group was never made (and moto cannot look for one).
    teardown = {
        **{k: v for k, v in half.items() if k in TEARDOWN_KEYS},
        "aws_foundation_placement_group": False,
    }
    succeeded(playbook(tmp_path, moto, "cluster_teardown", {"llm-half": teardown}))
    assert not any(tagged(moto, "llm-half").values())


AWS_POLICY = "arn:aws:iam::aws:policy/"
SSM = f"{AWS_POLICY}AmazonSSMManagedInstanceCore"
EKS_NODE_POLICIES = [
    f"{AWS_POLICY}{name}"
    for name in ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly", "AmazonEKS_CNI_Policy")
]


def attached_policies(iam: Any, role: str) -> list[str]:
    """The role's AWS managed policies, sorted (IAM keeps no order)."""
    return sorted(p["PolicyArn"] for p in iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"])


def service_role(iam: Any, name: str, service: str, cluster: str) -> dict[str, Any]:
    """The role, checked to trust exactly the one service and to carry the cluster's tag."""
    role = iam.get_role(RoleName=name)["Role"]
    assert [st["Principal"] for st in role["AssumeRolePolicyDocument"]["Statement"]] == [{"Service": service}]
    assert {"Key": TAG, "Value": cluster} in iam.list_role_tags(RoleName=name)["Tags"]
    return role


TEARDOWN_KEYS = {
    "aws_foundation_cluster_name",
    "aws_foundation_region",
    "aws_foundation_bucket_name",
    "aws_foundation_placement_group",
}
