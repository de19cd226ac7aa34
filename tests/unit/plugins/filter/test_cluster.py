"""cluster_head, cluster_group, cluster_foundation_vars: cluster playbooks, specs and the inventory agree."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.trainstack.cluster.plugins.filter.cluster import (
    cluster_foundation_vars,
    cluster_group,
    cluster_head,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.cluster_spec import load_file
from ansible_collections.trainstack.cluster.plugins.module_utils.inventory.ec2_cluster_model import (
    Node,
    group_names,
)

from tests.support import REPO
from tests.unit.roles.test_aws_foundation import refusal

# Two clusters as the plugin groups them (role_head holds both heads), plus their compute nodes.
GROUPS = {
    "cluster_train_a": [],
    "cluster_train_a_head": ["a-head"],
    "cluster_train_a_compute": ["a-c1", "a-c2"],
    "cluster_train_b_head": ["b-head"],
    "role_head": ["a-head", "b-head"],
}


def test_the_group_names_are_the_ones_the_inventory_plugin_makes() -> None:
    node = Node(
        instance_id="i-1",
        cluster_name="train-p5.v2",
        cluster_kind="parallelcluster",
        role="head",
        instance_type="p5.48xlarge",
        region="us-east-1",
    )
    made = [pair[0] for pair in group_names(node, "")]
    assert cluster_group("train-p5.v2") in made
    assert cluster_group("train-p5.v2", role="head") in made


@pytest.mark.parametrize(("cluster", "host"), [("train-a", "a-head"), ("train_b", "b-head")])
def test_a_cluster_name_picks_its_head(cluster: str, host: str) -> None:
    assert cluster_head(GROUPS, cluster=cluster) == {"host": host, "error": ""}


def test_a_cluster_without_a_head_host_is_reached_through_its_login_node() -> None:
    """PCS: AWS runs the controller, so the inventory holds login and compute groups only."""
    pcs = {"cluster_pcs_abc_login": ["login-1"], "cluster_pcs_abc_compute": ["gpu-1", "gpu-2"]}
    assert cluster_head(pcs, cluster="pcs_abc") == {"host": "login-1", "error": ""}
    with_head = {**pcs, "cluster_pcs_abc_head": ["head-1"]}
    assert cluster_head(with_head, cluster="pcs_abc")["host"] == "head-1"
    two = cluster_head({"cluster_p_login": ["l1", "l2"]}, cluster="p")["error"]
    assert two == "Cluster p (cluster_p_login) has 2 head hosts (l1, l2), one is needed"
    unknown = cluster_head(pcs, cluster="other")["error"]
    assert "no group cluster_other_head in the inventory (clusters: pcs_abc), nor cluster_other_login" in (
        unknown
    )


def test_one_head_needs_no_name_and_a_hand_written_head_group_wins() -> None:
    assert cluster_head({"role_head": ["only"]})["host"] == "only"
    assert cluster_head({"head": ["mine"], "role_head": ["a", "b"]})["host"] == "mine"


@pytest.mark.parametrize(
    ("groups", "cluster", "error"),
    [
        (GROUPS, "", "The inventory has 2 head hosts (a-head, b-head), one is needed; pick one with -e"),
        (GROUPS, "", "(clusters: train_a, train_b)"),
        (
            GROUPS,
            "train-c",
            "cluster=train-c: no group cluster_train_c_head in the inventory (clusters: train_a",
        ),
        (
            {"cluster_x_head": ["h1", "h2"]},
            "x",
            "Cluster x (cluster_x_head) has 2 head hosts (h1, h2), one is",
        ),
        ({}, "", "The inventory has no head host (group head or role_head)"),
        ({}, "x", "(clusters: none)"),
    ],
    ids=[
        "several-heads",
        "names-clusters",
        "unknown-cluster",
        "two-heads-in-a-cluster",
        "no-head",
        "no-cluster",
    ],
)
def test_no_head_or_several_heads_say_which_and_return_no_host(
    groups: dict, cluster: str, error: str
) -> None:
    found = cluster_head(groups, cluster=cluster)
    assert found["host"] == "" and error in found["error"]


EXAMPLE_SPECS = sorted((REPO / "inventories" / "aws" / "clusters").glob("*.yml"))


@pytest.mark.parametrize("path", EXAMPLE_SPECS, ids=[p.stem for p in EXAMPLE_SPECS])
def test_each_example_spec_maps_onto_foundation_inputs_the_role_accepts(path: Path) -> None:
    mapped = cluster_foundation_vars(load_file(path))
    assert set(mapped) <= set(yaml.safe_load((REPO / "roles/aws_foundation/defaults/main.yml").read_text()))
    assert refusal(mapped) is None


def test_the_spec_decides_network_placement_and_storage() -> None:
    p4d = cluster_foundation_vars(load_file(REPO / "inventories/aws/clusters/p4d.yml"))
    assert p4d["aws_foundation_vpc_create"] is True and p4d["aws_foundation_placement_group"] is True
    assert (p4d["aws_foundation_vpc_cidr"], p4d["aws_foundation_public_subnet_cidr"]) == (
        "10.40.0.0/16",
        "10.40.0.0/24",
    )
    assert p4d["aws_foundation_private_subnet_cidr"] == "10.40.128.0/17"
    # The data repository path names the bucket the file system links (an existing one: never created).
    assert (p4d["aws_foundation_bucket_name"], p4d["aws_foundation_bucket_create"]) == (
        "example-training-data",
        False,
    )
    assert (p4d["aws_foundation_fsx_s3_prefix"], p4d["aws_foundation_fsx_link_bucket"]) == ("datasets/", True)
    # ... into the directory the launch's data default names (the spec's, /data unless it says otherwise).
    assert p4d["aws_foundation_fsx_file_system_path"] == "/data"
    p5 = cluster_foundation_vars(load_file(REPO / "inventories/aws/clusters/p5.yml"))
    assert p5["aws_foundation_vpc_create"] is False
    assert p5["aws_foundation_private_subnet_id"] == "subnet-0f1e2d3c4b5a69788"
    g6e = cluster_foundation_vars(load_file(REPO / "inventories/aws/clusters/g6e.yml"))
    assert g6e["aws_foundation_fsx_link_bucket"] is False and "aws_foundation_bucket_name" not in g6e


@pytest.mark.parametrize(("cidr", "public", "private"), [("10.9.0.0/20", "10.9.0.0/28", "10.9.8.0/21")])
def test_a_small_vpc_still_gets_two_subnets_inside_it(cidr: str, public: str, private: str) -> None:
    spec = load_file(REPO / "inventories/aws/clusters/p4d.yml")
    spec["network"]["cidr"] = cidr
    mapped = cluster_foundation_vars(spec)
    assert (mapped["aws_foundation_public_subnet_cidr"], mapped["aws_foundation_private_subnet_cidr"]) == (
        public,
        private,
    )
    assert refusal(mapped) is None


def test_the_orchestrator_is_named_or_read_from_the_spec() -> None:
    """HyperPod's section means HyperPod; nothing in a spec says EKS, so it is named; the second quarter of
    the VPC is the private subnet of EKS's second zone (the role makes it only for EKS)."""
    p4d = load_file(REPO / "inventories/aws/clusters/p4d.yml")
    assert cluster_foundation_vars(p4d)["aws_foundation_orchestrator"] == "parallelcluster"
    eks = cluster_foundation_vars(load_file(REPO / "inventories/aws/eks/train-eks.yml"), "eks")
    assert eks["aws_foundation_orchestrator"] == "eks"
    assert eks["aws_foundation_second_private_subnet_cidr"] == "10.0.64.0/18"
    assert refusal(eks) is None
    hyperpod = cluster_foundation_vars(load_file(REPO / "inventories/aws/hyperpod/train-hp.yml"))
    assert hyperpod["aws_foundation_orchestrator"] == "hyperpod"
    assert refusal(hyperpod) is None


def test_an_unknown_orchestrator_is_refused_naming_the_key() -> None:
    with pytest.raises(AnsibleFilterError, match=r"cluster_orchestrator: 'kubernetes' .* one of .*eks"):
        cluster_foundation_vars(load_file(REPO / "inventories/aws/clusters/p4d.yml"), "kubernetes")
