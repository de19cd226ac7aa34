"""The slurm_cluster playbook on the lab: a second run changes nothing, the munge key is private on every
node, and both compute nodes serve the default partition.

These are the checks of the `slurm_cluster` molecule scenario that `make test` needs, run on the lab that
the other Slurm and launch tests already use (the `slurm_lab` fixture installs Slurm on it with the same
playbook), so that a cold run installs Slurm on three nodes once, not twice. The scenario itself (its own
three nodes, a held job across a controller restart, and the controller starting before slurmdbd) runs in
`make test-slow`.
"""

from __future__ import annotations

import re

import pytest

from tests.support import on_lab_node, playbook, wait_for

pytestmark = pytest.mark.lab

NODES = {"ts-head": "10.77.0.11", "ts-compute1": "10.77.0.12", "ts-compute2": "10.77.0.13"}


def test_a_second_run_changes_nothing(slurm_lab: None) -> None:
    again = playbook("slurm_cluster", "-i", "inventories/local")
    recaps = re.findall(r"^(ts-\S+)\s+: ok=\d+\s+changed=(\d+)\s", again.stdout, re.M)
    assert sorted(name for name, changed in recaps) == sorted(NODES), again.stdout[-2000:]
    assert all(changed == "0" for name, changed in recaps), again.stdout[-3000:]


@pytest.mark.parametrize("address", NODES.values(), ids=NODES.keys())
def test_munge_key_is_private_and_munge_runs(slurm_lab: None, address: str) -> None:
    key = on_lab_node("stat -c '%U %G %a %s' /etc/munge/munge.key", address)
    assert key == "munge munge 400 1024"
    assert on_lab_node("systemctl is-active munge", address) == "active"


def test_both_compute_nodes_are_idle_in_the_default_partition(slurm_lab: None) -> None:
    rows = "sinfo --noheader --format '%P %a %D %t %N'"
    expected = ["compute* up 2 idle ts-compute[1-2]"]
    wait_for(lambda: on_lab_node(rows).splitlines() == expected, 90, "both compute nodes idle")
