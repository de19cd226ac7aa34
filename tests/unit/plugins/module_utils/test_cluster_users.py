"""The user list's rules (module_utils/slurm/cluster_users): bad entries are named before the directory or
Slurm accounting changes, and the sacctmgr calls are empty once accounting matches (the roles' idempotence).

Keys are made by ssh-keygen, so the key check is held against what OpenSSH writes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from plugins.module_utils.slurm.cluster_users import (
    association_commands,
    group_members,
    qos_commands,
    ssh_key_problem,
    user_list_problems,
)

GROUPS = [{"name": "research", "gid": 5000}, {"name": "gpu", "gid": 5001}]
QOS = [{"name": "onenode", "max_nodes": 1, "max_wall": "01:00:00", "priority": 10, "max_gpus_per_user": 2}]


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Public key lines of an ed25519 and an RSA key, as ssh-keygen writes them."""
    found = {}
    for kind in ("ed25519", "rsa"):
        path = tmp_path_factory.mktemp(kind) / "id"
        subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "c", "-f", str(path)], check=True)
        found[kind] = Path(f"{path}.pub").read_text().strip()
    return found


def _alice(key: str, **changes: object) -> dict:
    user = {
        "name": "alice",
        "uid": 6001,
        "gid": 5000,
        "groups": ["research"],
        "ssh_key": key,
        "qos": "onenode",
    }
    return {**user, **changes}


def test_a_good_list_has_no_problems(keys):
    users = [
        _alice(keys["ed25519"]),
        _alice(keys["rsa"], name="bob", uid=6002, qos=None),
        {"name": "carol", "state": "absent"},
    ]
    assert user_list_problems(users, GROUPS, QOS) == []


def test_a_duplicate_uid_names_both_users(keys):
    problems = user_list_problems([_alice(keys["ed25519"]), _alice(keys["rsa"], name="bob")], GROUPS, QOS)
    assert problems == ["cluster_users_list: uid 6001 is used by more than one user (alice, bob)"]


def test_an_unlisted_group_and_gid_are_named(keys):
    problems = user_list_problems(
        [_alice(keys["ed25519"], groups=["research", "admins"], gid=7000)], GROUPS, QOS
    )
    assert "cluster_users_list[0] (alice): group admins is not in cluster_users_groups" in problems
    assert (
        "cluster_users_list[0] (alice): gid 7000 is not the gid of a group in cluster_users_groups"
        in problems
    )


def test_an_unknown_qos_is_named(keys):
    problems = user_list_problems([_alice(keys["ed25519"], qos=["onenode", "huge"])], GROUPS, QOS)
    assert problems == ["cluster_users_list[0] (alice): QOS huge is not in cluster_users_qos"]


def test_an_unknown_account_is_named_when_accounts_are_listed(keys):
    problems = user_list_problems(
        [_alice(keys["ed25519"], account="physics")], GROUPS, QOS, [{"name": "research"}]
    )
    assert problems == ["cluster_users_list[0] (alice): account physics is not in cluster_users_accounts"]


@pytest.mark.parametrize(
    ("mangle", "why"),
    [
        (lambda key: key.split()[1], "is not '<type> <base64> [comment]'"),
        (lambda key: "ssh-dss " + key.split()[1], "has unknown key type 'ssh-dss'"),
        (lambda key: key[:30] + "!!" + key[32:], "has a key body that is not base64"),
        (lambda key: "ssh-rsa " + key.split()[1], "has a key body that is not a ssh-rsa key"),
    ],
)
def test_an_invalid_ssh_key_is_named(keys, mangle, why):
    problems = user_list_problems([_alice(mangle(keys["ed25519"]))], GROUPS, QOS)
    assert problems == [f"cluster_users_list[0] (alice): ssh_key {why}"]


def test_real_keys_pass_the_key_check(keys):
    assert ssh_key_problem(keys["ed25519"]) is None
    assert ssh_key_problem(keys["rsa"]) is None


def test_bad_qos_and_group_entries_are_named():
    problems = user_list_problems(
        [], [{"name": "g", "gid": "x"}, {"name": "g", "gid": 1}], [{"name": "q", "max_wall": "1h"}]
    )
    assert "cluster_users_groups[0] (g): gid must be an integer" in problems
    assert "cluster_users_groups: name g is used by more than one group (g, g)" in problems
    assert "cluster_users_qos[0] (q): max_wall must be [D-]HH:MM:SS" in problems


def test_group_members_are_the_present_users(keys):
    users = [
        _alice(keys["ed25519"]),
        {"name": "bob", "groups": ["research", "gpu"]},
        {"name": "carol", "state": "absent", "groups": ["gpu"]},
    ]
    assert group_members(users, GROUPS) == {"research": ["alice", "bob"], "gpu": ["bob"]}


def test_qos_is_added_then_left_alone():
    assert qos_commands(QOS, []) == [
        [
            "sacctmgr",
            "--immediate",
            "add",
            "qos",
            "onenode",
            "Priority=10",
            "MaxWall=01:00:00",
            "MaxTRESPerJob=node=1",
            "MaxTRESPerUser=gres/gpu=2",
        ]
    ]
    assert qos_commands(QOS, ["onenode|10|01:00:00|node=1|gres/gpu=2|"]) == []
    changed = qos_commands(QOS, ["onenode|10|01:00:00|node=2|gres/gpu=2|"])
    assert changed[0][:6] == ["sacctmgr", "--immediate", "modify", "qos", "where", "name=onenode"]


def test_associations_are_added_then_left_alone_and_absent_users_deleted(keys):
    users = [_alice(keys["ed25519"], account="research"), {"name": "carol", "state": "absent"}]
    first = association_commands(
        users, [{"name": "research", "fairshare": 10}], ["root||1|normal|", "root|root|1|normal|"], "c"
    )
    assert first == [
        ["sacctmgr", "--immediate", "add", "account", "research", "Cluster=c", "Fairshare=10"],
        [
            "sacctmgr",
            "--immediate",
            "add",
            "user",
            "alice",
            "Account=research",
            "Cluster=c",
            "Fairshare=1",
            "QOS=onenode",
            "DefaultQOS=onenode",
        ],
    ]
    shown = ["research||10|normal|", "research|alice|1|onenode|onenode", "research|carol|1|normal|"]
    assert association_commands(users, [{"name": "research", "fairshare": 10}], shown, "c") == [
        ["sacctmgr", "--immediate", "delete", "user", "where", "name=carol", "cluster=c"]
    ]
    assert association_commands(users, [{"name": "research", "fairshare": 10}], shown[:2], "c") == []


def test_accounting_alone_checks_qos_and_keys_but_not_groups():
    users = [{"name": "alice", "account": "research", "qos": "huge", "groups": ["nowhere"]}]
    assert user_list_problems(users, None, QOS) == [
        "cluster_users_list[0] (alice): QOS huge is not in cluster_users_qos"
    ]
