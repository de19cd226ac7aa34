"""The validation playbooks refuse an inventory without their target hosts instead of succeeding silently.

Real ansible-playbook runs of the collection's playbooks against small YAML inventories (no lab, no network):
an empty one must fail in the first play, naming the group and the inventory; one with a matching host must
get past it (the next play then stops at its own input check, which proves the guard let it through).
"""

from __future__ import annotations

import pytest

from tests.support import playbook

PLAYBOOKS = {
    "validate_cluster": (
        "validate_cluster: no host in the inventory ({inventory}) matches 'all' (node_health_hosts, default"
        " the cluster_<name> group of -e cluster=<name>, else 'all'): nothing would be validated."
    ),
    "nccl_acceptance": (
        "nccl_acceptance: The inventory has no head host (group head or role_head) in the inventory"
        " ({inventory}) (nccl_acceptance_head, else the head of -e cluster=<name>, else the inventory's only"
        " head): nothing would be tested."
    ),
}


def flat(text: str) -> str:
    """Ansible folds long messages over lines and doubles single quotes in YAML output: undo both."""
    return " ".join(text.replace("''", "'").split())


@pytest.mark.parametrize("name", sorted(PLAYBOOKS))
def test_empty_inventory_fails_naming_group_and_inventory(tmp_path, name):
    inventory = tmp_path / "empty.yml"
    inventory.write_text("all: {}\n", encoding="utf-8")
    done = playbook(name, "-i", str(inventory), check=False, timeout=120)
    assert done.returncode == 2, done.stdout[-2000:]
    assert PLAYBOOKS[name].format(inventory=inventory) in flat(done.stdout)


def test_a_pattern_that_matches_nothing_is_named(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("head:\n  hosts:\n    ts-head: {ansible_connection: local}\n", encoding="utf-8")
    done = playbook("validate_cluster", "-i", str(inventory), "-e", "node_health_hosts=gpu", check=False)
    assert done.returncode == 2 and "matches 'gpu' (node_health_hosts" in flat(done.stdout)


@pytest.mark.parametrize(
    ("name", "extra", "next_failure"),
    [
        ("nccl_acceptance", "nccl_acceptance_benchmark=bogus", "nccl_acceptance_benchmark=bogus must be"),
        ("validate_cluster", "node_health_instance_type=bogus", "node_health_instance_type=bogus must be"),
    ],
)
def test_an_inventory_with_the_group_passes_the_guard(tmp_path, name, extra, next_failure):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("head:\n  hosts:\n    ts-head: {ansible_connection: local}\n", encoding="utf-8")
    done = playbook(name, "-i", str(inventory), "-e", extra, "-e", "node_health_results_dir=", check=False)
    text = flat(done.stdout)
    assert "no host in the inventory" not in text and next_failure in text, done.stdout[-2000:]


# Two clusters as the ec2_cluster inventory plugin groups them.
CLUSTERS = "".join(
    f"cluster_train_{c}:\n  children:\n    cluster_train_{c}_head:\n"
    f"      hosts:\n        {c}-head: {{ansible_connection: local}}\n"
    for c in "ab"
)


def test_a_cluster_name_matching_no_cluster_is_named_with_the_known_ones(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(CLUSTERS, encoding="utf-8")
    done = playbook("nccl_acceptance", "-i", str(inventory), "-e", "cluster=train-c", check=False)
    assert done.returncode == 2
    assert (
        "cluster=train-c: no group cluster_train_c_head in the inventory (clusters: train_a, train_b)"
        in flat(done.stdout)
    )
    done = playbook("validate_cluster", "-i", str(inventory), "-e", "cluster=train-c", check=False)
    assert done.returncode == 2 and "matches 'cluster_train_c' (node_health_hosts" in flat(done.stdout)


@pytest.mark.parametrize(
    ("name", "extra", "next_failure"),
    [
        ("nccl_acceptance", "nccl_acceptance_benchmark=bogus", "nccl_acceptance_benchmark=bogus must be"),
        ("validate_cluster", "node_health_instance_type=bogus", "node_health_instance_type=bogus must be"),
    ],
)
def test_a_cluster_name_picks_that_cluster(tmp_path, name, extra, next_failure):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(CLUSTERS, encoding="utf-8")
    done = playbook(
        name,
        "-i",
        str(inventory),
        "-e",
        "cluster=train-b",
        "-e",
        extra,
        "-e",
        "node_health_results_dir=",
        check=False,
    )
    text = flat(done.stdout)
    assert next_failure in text and "[b-head]" in text and "a-head" not in text, done.stdout[-2000:]
