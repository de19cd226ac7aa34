"""The user list's check as the cluster_users, slurm_accounting and ldap_server roles run it: their assert
tasks rendered with Ansible's templar and the collection's filters, so that a bad entry is named before the
directory or Slurm accounting changes (the rules themselves:
tests/unit/plugins/module_utils/test_cluster_users.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support import assert_task_failure, role_data_templar, role_task

GROUPS = [{"name": "research", "gid": 5000}]
QOS = [{"name": "onenode", "max_nodes": 1}]


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("key") / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return Path(f"{path}.pub").read_text().strip()


def _alice(key: str, **changes: object) -> dict:
    return {
        "name": "alice",
        "uid": 6001,
        "gid": 5000,
        "groups": ["research"],
        "ssh_key": key,
        "qos": "onenode",
        **changes,
    }


def _cluster_users_check(users: list, password: str = "secret-password") -> str | None:
    templ = role_data_templar(
        "cluster_users",
        cluster_users_list=users,
        cluster_users_groups=GROUPS,
        cluster_users_qos=QOS,
        cluster_users_bind_password=password,
    )
    return assert_task_failure(templ, role_task("cluster_users", "validate.yml", "Check the user list"))


def test_a_good_list_passes(key):
    assert _cluster_users_check([_alice(key), {"name": "bob", "state": "absent"}]) is None


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"groups": ["admins"]}, "cluster_users_list[1] (bob): group admins is not in cluster_users_groups"),
        ({"qos": "huge"}, "cluster_users_list[1] (bob): QOS huge is not in cluster_users_qos"),
        ({"uid": 6001}, "uid 6001 is used by more than one user (alice, bob)"),
        (
            {"ssh_key": "ssh-ed25519 bm90IGEga2V5"},
            "cluster_users_list[1] (bob): ssh_key has a key body that is not",
        ),
    ],
)
def test_a_bad_entry_is_named_and_nothing_changes(key, changes, named):
    message = _cluster_users_check([_alice(key), _alice(key, **{"name": "bob", "uid": 6002, **changes})])
    assert message is not None and named in message and "nothing was changed" in message


def test_a_missing_bind_password_is_named_without_a_value(key):
    message = _cluster_users_check([_alice(key)], password="")
    assert message is not None and "cluster_users_bind_password is required" in message


def test_accounting_refuses_an_unknown_qos_before_sacctmgr(key):
    templ = role_data_templar(
        "slurm_accounting", slurm_accounting_users=[_alice(key, qos="huge")], slurm_accounting_qos=QOS
    )
    task = role_task("slurm_accounting", "associations.yml", "Check the user list before changing accounting")
    message = assert_task_failure(templ, task)
    assert message is not None and "QOS huge is not in cluster_users_qos" in message


def test_ldap_server_refuses_a_short_password_without_printing_it():
    templ = role_data_templar(
        "ldap_server",
        ldap_server_admin_password="short",
        ansible_facts={"distribution": "Debian", "fqdn": "h"},
    )
    message = assert_task_failure(
        templ, role_task("ldap_server", "checks.yml", "Check the directory settings")
    )
    assert message is not None and "ldap_server_admin_password" in message and "short" not in message
