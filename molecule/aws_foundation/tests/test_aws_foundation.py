"""Verifier for roles/aws_foundation against the scenario's moto server.

Reads back with boto3 what the role promises (network, EFA security group, bucket, IAM, FSx) and that the
outputs name it; then, last, runs the teardown entry point and checks that it removed exactly the resources
that carry the cluster's tag (with what goes with its VPC) and left the account's other resources, including
those prepare made with a name or tag the teardown looks at. The tests run in file order: the teardown last.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import boto3
import pytest

TAG = "trainstack:cluster"
EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
SCENARIO = Path(__file__).resolve().parents[1]
AWS_POLICY = "arn:aws:iam::aws:policy/"
NODE_POLICIES = [
    f"{AWS_POLICY}{name}"
    for name in (
        "AmazonSSMManagedInstanceCore",
        "AmazonEKSWorkerNodePolicy",
        "AmazonEC2ContainerRegistryReadOnly",
        "AmazonEKS_CNI_Policy",
    )
]


@pytest.fixture(scope="module")
def spec(host) -> dict[str, Any]:
    """The scenario's aws_foundation_* variables, as the inventory gives them to the role."""
    return host.ansible.get_variables()


@pytest.fixture(scope="module")
def outputs() -> dict[str, Any]:
    return json.loads((EPHEMERAL / "outputs.json").read_text())


def client(name: str, spec: dict[str, Any]) -> Any:
    # The endpoint and test keys come from the environment molecule gives the verifier (provisioner.env).
    assert os.environ["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:"), "AWS calls must go to moto"
    return boto3.client(name, region_name=spec["aws_foundation_region"])


def tags(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", [])}


def test_vpc_and_subnets(spec, outputs):
    ec2 = client("ec2", spec)
    cluster = spec["aws_foundation_cluster_name"]
    vpcs = ec2.describe_vpcs(Filters=[{"Name": f"tag:{TAG}", "Values": [cluster]}])["Vpcs"]
    assert [v["VpcId"] for v in vpcs] == [outputs["vpc_id"]]
    assert vpcs[0]["CidrBlock"] == spec["aws_foundation_vpc_cidr"]
    assert tags(vpcs[0]) == {TAG: cluster, "team": "ml", "Name": f"{cluster}-vpc"}
    for attribute in ("enableDnsSupport", "enableDnsHostnames"):
        answer = ec2.describe_vpc_attribute(VpcId=outputs["vpc_id"], Attribute=attribute)
        assert answer[attribute[0].upper() + attribute[1:]]["Value"] is True, attribute

    subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [outputs["vpc_id"]]}])["Subnets"]
    found = {
        tags(s)["Name"]: (s["SubnetId"], s["CidrBlock"], s["AvailabilityZone"], s["MapPublicIpOnLaunch"])
        for s in subnets
    }
    zone = spec["aws_foundation_availability_zone"]
    assert found == {
        f"{cluster}-public": (
            outputs["public_subnet_id"],
            spec["aws_foundation_public_subnet_cidr"],
            zone,
            True,
        ),
        f"{cluster}-private": (
            outputs["private_subnet_id"],
            spec["aws_foundation_private_subnet_cidr"],
            zone,
            False,
        ),
        # EKS: the control plane's second zone, the region's first other one.
        f"{cluster}-private-2": (
            outputs["second_private_subnet_id"],
            spec["aws_foundation_second_private_subnet_cidr"],
            "us-east-1b",
            False,
        ),
    }
    assert all(tags(s)[TAG] == cluster for s in subnets)


def test_routes_gateways_and_s3_endpoint(spec, outputs):
    ec2 = client("ec2", spec)
    cluster = spec["aws_foundation_cluster_name"]
    tables = ec2.describe_route_tables(Filters=[{"Name": f"tag:{TAG}", "Values": [cluster]}])["RouteTables"]
    by_name = {tags(t)["Name"]: t for t in tables}
    assert sorted(by_name) == [f"{cluster}-private", f"{cluster}-public"]

    def associated(table: dict[str, Any]) -> list[str]:
        return sorted(a["SubnetId"] for a in table["Associations"] if a.get("SubnetId"))

    def default_route(table: dict[str, Any]) -> dict[str, Any]:
        return next(r for r in table["Routes"] if r.get("DestinationCidrBlock") == "0.0.0.0/0")

    public, private = by_name[f"{cluster}-public"], by_name[f"{cluster}-private"]
    assert associated(public) == [outputs["public_subnet_id"]]
    assert associated(private) == sorted([outputs["private_subnet_id"], outputs["second_private_subnet_id"]])

    igw = ec2.describe_internet_gateways(InternetGatewayIds=[default_route(public)["GatewayId"]])
    igw = igw["InternetGateways"][0]
    assert [a["VpcId"] for a in igw["Attachments"]] == [outputs["vpc_id"]] and tags(igw)[TAG] == cluster

    nat = ec2.describe_nat_gateways(NatGatewayIds=[default_route(private)["NatGatewayId"]])["NatGateways"][0]
    assert nat["SubnetId"] == outputs["public_subnet_id"] and nat["State"] == "available"
    assert tags(nat)[TAG] == cluster
    # The NAT gateway's address carries the tag too: that is how the teardown finds it.
    address = ec2.describe_addresses(AllocationIds=[nat["NatGatewayAddresses"][0]["AllocationId"]])
    assert tags(address["Addresses"][0])[TAG] == cluster

    endpoints = ec2.describe_vpc_endpoints(Filters=[{"Name": "vpc-id", "Values": [outputs["vpc_id"]]}])
    endpoints = endpoints["VpcEndpoints"]
    assert [(e["ServiceName"], e["VpcEndpointType"]) for e in endpoints] == [
        (f"com.amazonaws.{spec['aws_foundation_region']}.s3", "Gateway")
    ]
    assert sorted(endpoints[0]["RouteTableIds"]) == sorted(t["RouteTableId"] for t in tables)


def test_efa_security_group(spec, outputs):
    ec2 = client("ec2", spec)
    group = ec2.describe_security_groups(GroupIds=[outputs["security_group_id"]])["SecurityGroups"][0]
    assert group["VpcId"] == outputs["vpc_id"]
    assert tags(group)[TAG] == spec["aws_foundation_cluster_name"]

    def rules(permissions: list[dict[str, Any]]) -> list[tuple]:
        found = []
        for rule in permissions:
            kind = (rule["IpProtocol"], rule.get("FromPort"))
            found += [(*kind, p["GroupId"]) for p in rule["UserIdGroupPairs"]]
            found += [(*kind, r["CidrIp"]) for r in rule["IpRanges"]]
        return sorted(found, key=str)

    own = outputs["security_group_id"]
    # EFA: every protocol to and from the group itself; SSH only from the given range; egress as given.
    assert rules(group["IpPermissions"]) == sorted(
        [("-1", None, own), *[("tcp", 22, c) for c in spec["aws_foundation_ssh_cidrs"]]], key=str
    )
    egress = [("-1", None, own), *[("-1", None, c) for c in spec["aws_foundation_egress_cidrs"]]]
    assert rules(group["IpPermissionsEgress"]) == sorted(egress, key=str)


def test_bucket(spec, outputs):
    s3 = client("s3", spec)
    bucket = outputs["bucket"]
    assert bucket == f"trainstack-{spec['aws_foundation_cluster_name']}-{spec['aws_foundation_region']}"
    rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
    assert rules[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    block = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
    assert block == dict.fromkeys(
        ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets"), True
    )
    ownership = s3.get_bucket_ownership_controls(Bucket=bucket)["OwnershipControls"]["Rules"]
    assert [r["ObjectOwnership"] for r in ownership] == ["BucketOwnerEnforced"]
    assert {t["Key"]: t["Value"] for t in s3.get_bucket_tagging(Bucket=bucket)["TagSet"]}[TAG] == spec[
        "aws_foundation_cluster_name"
    ]


def test_node_role_profile_and_eks_cluster_role(spec, outputs):
    iam = client("iam", spec)
    cluster = spec["aws_foundation_cluster_name"]
    role = iam.get_role(RoleName=outputs["instance_role_name"])["Role"]
    assert role["Arn"] == outputs["instance_role_arn"] == outputs["eks_node_role_arn"]
    assert [s["Principal"] for s in role["AssumeRolePolicyDocument"]["Statement"]] == [
        {"Service": "ec2.amazonaws.com"}
    ]
    attached = iam.list_attached_role_policies(RoleName=role["RoleName"])["AttachedPolicies"]
    assert sorted(p["PolicyArn"] for p in attached) == sorted(NODE_POLICIES)
    inline = iam.get_role_policy(RoleName=role["RoleName"], PolicyName="read-cluster-bucket")
    inline = inline["PolicyDocument"]
    bucket = f"arn:aws:s3:::{outputs['bucket']}"
    assert {(a, s["Resource"]) for s in inline["Statement"] for a in s["Action"]} == {
        ("s3:ListBucket", bucket),
        ("s3:GetBucketLocation", bucket),
        ("s3:GetObject", f"{bucket}/*"),
    }
    assert iam.list_role_policies(RoleName=role["RoleName"])["PolicyNames"] == ["read-cluster-bucket"]
    profile = iam.get_instance_profile(InstanceProfileName=outputs["instance_profile_name"])
    profile = profile["InstanceProfile"]
    assert profile["Arn"] == outputs["instance_profile_arn"]
    assert [r["RoleName"] for r in profile["Roles"]] == [role["RoleName"]]

    eks = iam.get_role(RoleName=f"trainstack-{cluster}-eks-cluster")["Role"]
    assert eks["Arn"] == outputs["eks_cluster_role_arn"]
    assert [s["Principal"] for s in eks["AssumeRolePolicyDocument"]["Statement"]] == [
        {"Service": "eks.amazonaws.com"}
    ]
    attached = iam.list_attached_role_policies(RoleName=eks["RoleName"])["AttachedPolicies"]
    assert [p["PolicyArn"] for p in attached] == [f"{AWS_POLICY}AmazonEKSClusterPolicy"]
    for name in (role["RoleName"], eks["RoleName"]):
        assert {"Key": TAG, "Value": cluster} in iam.list_role_tags(RoleName=name)["Tags"], name
    # Not HyperPod: the execution role of that name is another cluster's (prepare made it) and stays so.
    assert outputs["hyperpod_execution_role_arn"] == ""
    other = iam.list_role_tags(RoleName=f"trainstack-{cluster}-hyperpod")["Tags"]
    assert other == [{"Key": TAG, "Value": "other-cluster"}]


def test_fsx_lustre(spec, outputs):
    fsx = client("fsx", spec)
    found = fsx.describe_file_systems(FileSystemIds=[outputs["fsx_file_system_id"]])["FileSystems"][0]
    assert found["FileSystemType"] == "LUSTRE"
    assert found["SubnetIds"] == [outputs["private_subnet_id"]]
    assert found["StorageCapacity"] == 1200
    assert found["LustreConfiguration"]["DeploymentType"] == "PERSISTENT_2"
    assert found["LustreConfiguration"]["PerUnitStorageThroughput"] == 250
    assert found["DNSName"] == outputs["fsx_dns_name"]
    assert tags(found)[TAG] == spec["aws_foundation_cluster_name"]


def test_outputs_describe_the_cluster(spec, outputs):
    assert outputs["cluster_name"] == spec["aws_foundation_cluster_name"]
    assert outputs["orchestrator"] == "eks" and outputs["second_availability_zone"] == "us-east-1b"
    assert outputs["placement_group"] == ""  # switched off: moto has no placement groups


# ------------------------------------------------------------------ teardown (last: it removes the cluster)
def inventory(spec: dict[str, Any]) -> dict[str, set[str]]:
    """Every resource of the kinds the role makes, in the whole account, with its VPC where it has one."""
    ec2, iam, s3 = client("ec2", spec), client("iam", spec), client("s3", spec)
    live = [{"Name": "state", "Values": ["pending", "available"]}]
    return {
        "vpcs": {v["VpcId"] for v in ec2.describe_vpcs()["Vpcs"]},
        "subnets": {f"{s['VpcId']} {s['SubnetId']}" for s in ec2.describe_subnets()["Subnets"]},
        "route_tables": {
            f"{r['VpcId']} {r['RouteTableId']}" for r in ec2.describe_route_tables()["RouteTables"]
        },
        "security_groups": {
            f"{g.get('VpcId')} {g['GroupId']}" for g in ec2.describe_security_groups()["SecurityGroups"]
        },
        "internet_gateways": {
            g["InternetGatewayId"] for g in ec2.describe_internet_gateways()["InternetGateways"]
        },
        "nat_gateways": {n["NatGatewayId"] for n in ec2.describe_nat_gateways(Filters=live)["NatGateways"]},
        "addresses": {a["AllocationId"] for a in ec2.describe_addresses()["Addresses"]},
        "endpoints": {
            e["VpcEndpointId"]
            for e in ec2.describe_vpc_endpoints()["VpcEndpoints"]
            if e["State"].lower() != "deleted"
        },
        "buckets": {b["Name"] for b in s3.list_buckets()["Buckets"]},
        "roles": {r["RoleName"] for r in iam.list_roles()["Roles"]},
        "instance_profiles": {
            p["InstanceProfileName"] for p in iam.list_instance_profiles()["InstanceProfiles"]
        },
        "file_systems": {
            f["FileSystemId"]
            for f in client("fsx", spec).describe_file_systems()["FileSystems"]
            if f.get("Lifecycle") != "DELETING"
        },
    }


def run_teardown() -> dict[str, Any]:
    """The role's teardown entry point through ansible-playbook, as a user runs it; the JSON report."""
    env = {**os.environ, "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"}
    done = subprocess.run(
        ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(SCENARIO / "teardown.yml")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return json.loads(done.stdout)


def changed_tasks(report: dict[str, Any]) -> list[str]:
    return [
        task["task"]["name"]
        for play in report["plays"]
        for task in play["tasks"]
        for outcome in task["hosts"].values()
        if outcome.get("changed")
    ]


def test_teardown_removes_what_the_cluster_made_and_nothing_else(spec, outputs):
    before = inventory(spec)
    made = {
        "vpcs": {outputs["vpc_id"]},
        "buckets": {outputs["bucket"]},
        "roles": {outputs["instance_role_name"], f"trainstack-{outputs['cluster_name']}-eks-cluster"},
        "instance_profiles": {outputs["instance_profile_name"]},
        "file_systems": {outputs["fsx_file_system_id"]},
    }
    for kind, names in made.items():
        assert names <= before[kind], kind
    # The cluster's bucket goes with what is in it.
    client("s3", spec).put_object(Bucket=outputs["bucket"], Key="bootstrap/node.sh", Body=b"#!/bin/sh\n")

    report = run_teardown()
    assert changed_tasks(report), "the teardown removed nothing"
    after = inventory(spec)
    vpc = outputs["vpc_id"]
    # Everything in the cluster's VPC goes with it (its main route table and default group too); of the
    # rest, exactly the cluster's resources. Gateways, NAT addresses and endpoints of the VPC were all its.
    in_vpc = {"subnets", "route_tables", "security_groups"}
    expected = {
        kind: (
            {r for r in found if not r.startswith(f"{vpc} ")}
            if kind in in_vpc
            else found - made.get(kind, set())
        )
        for kind, found in before.items()
    }
    for kind in ("internet_gateways", "nat_gateways", "addresses", "endpoints"):
        expected[kind] = set()
    assert after == expected

    # What prepare made, by name: each is still there as it was.
    ec2, s3, iam = client("ec2", spec), client("s3", spec), client("iam", spec)
    unrelated = ec2.describe_vpcs(Filters=[{"Name": "tag:Name", "Values": ["unrelated-vpc"]}])["Vpcs"]
    assert [v["CidrBlock"] for v in unrelated] == ["192.168.0.0/16"]
    groups = ec2.describe_security_groups(Filters=[{"Name": f"tag:{TAG}", "Values": ["other-cluster"]}])
    assert [g["GroupName"] for g in groups["SecurityGroups"]] == ["other-cluster-efa"]
    objects = s3.list_objects_v2(Bucket="unrelated-datasets")["Contents"]
    assert [o["Key"] for o in objects] == ["corpus/part-0000.jsonl"]
    role = f"trainstack-{spec['aws_foundation_cluster_name']}-hyperpod"
    assert iam.list_role_tags(RoleName=role)["Tags"] == [{"Key": TAG, "Value": "other-cluster"}]

    # A teardown run again (after an interrupted one, say) finds nothing to do.
    assert changed_tasks(run_teardown()) == []
