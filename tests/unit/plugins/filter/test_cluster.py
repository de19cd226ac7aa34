"""cluster_head and cluster_group: the cluster playbooks find hosts as the ec2_cluster plugin groups them."""

from __future__ import annotations

import pytest
from ansible_collections.trainstack.cluster.plugins.filter.cluster import cluster_group, cluster_head
from ansible_collections.trainstack.cluster.plugins.module_utils.ec2_cluster_model import Node, group_names

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
