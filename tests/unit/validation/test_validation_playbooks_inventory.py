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
        "validate_cluster: no host in the inventory ({inventory}) matches 'all' (node_health_hosts,"
        " default group 'all'): nothing would be validated."
    ),
    "nccl_acceptance": (
        "nccl_acceptance: no host in the inventory ({inventory}) matches 'head' (nccl_acceptance_head,"
        " default group 'head'): nothing would be tested."
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
