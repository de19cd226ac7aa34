# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Rules of the cluster's user list: one list feeds the directory (cluster_users) and Slurm accounting
(slurm_accounting), so it is checked once, before either changes anything.

Why here: a duplicate uid or a key that sshd cannot parse would otherwise surface half-way through a run, with
some people already in the directory; the checks name the entry and the rule instead.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from collections.abc import Iterable, Mapping
from typing import Any

NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
WALL = re.compile(r"^(\d+-)?\d{2}:\d{2}:\d{2}$")
KEY_TYPES = frozenset(
    {
        "ssh-ed25519",
        "ssh-rsa",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "sk-ssh-ed25519@openssh.com",
        "sk-ecdsa-sha2-nistp256@openssh.com",
    }
)
STATES = ("present", "absent")


def ssh_key_problem(key: str) -> str | None:
    """Why an OpenSSH public key line cannot be used, or None: its type must be known and its base64 blob must
    decode and begin with the same type (what sshd checks before it compares keys)."""
    parts = str(key).split()
    if len(parts) < 2:
        return "is not '<type> <base64> [comment]'"
    kind, blob = parts[0], parts[1]
    if kind not in KEY_TYPES:
        return f"has unknown key type {kind!r}"
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        return "has a key body that is not base64"
    if len(raw) < 4:
        return "has a truncated key body"
    (length,) = struct.unpack(">I", raw[:4])
    if raw[4 : 4 + length] != kind.encode() or len(raw) <= 4 + length:
        return f"has a key body that is not a {kind} key"
    return None


def _duplicates(entries: Iterable[Mapping[str, Any]], key: str) -> dict[Any, list[str]]:
    """Values of `key` used by more than one entry, with the entries' names."""
    seen: dict[Any, list[str]] = {}
    for entry in entries:
        if entry.get(key) is not None:
            seen.setdefault(entry[key], []).append(str(entry.get("name")))
    return {value: names for value, names in seen.items() if len(names) > 1}


def group_problems(groups: list[Mapping[str, Any]]) -> list[str]:
    """Rules of the group list: a valid name and an integer gid, both unique."""
    problems = []
    for index, group in enumerate(groups):
        label = f"cluster_users_groups[{index}] ({group.get('name')})"
        if not NAME.match(str(group.get("name", ""))):
            problems.append(f"{label}: name must match {NAME.pattern}")
        if not isinstance(group.get("gid"), int) or isinstance(group.get("gid"), bool):
            problems.append(f"{label}: gid must be an integer")
    for key in ("name", "gid"):
        for value, names in _duplicates(groups, key).items():
            problems.append(
                f"cluster_users_groups: {key} {value} is used by more than one group ({', '.join(names)})"
            )
    return problems


def qos_problems(qos: list[Mapping[str, Any]]) -> list[str]:
    """Rules of the QOS list: a name, non-negative integer limits, a wall time of [D-]HH:MM:SS."""
    problems = []
    for index, entry in enumerate(qos):
        label = f"cluster_users_qos[{index}] ({entry.get('name')})"
        if not NAME.match(str(entry.get("name", ""))):
            problems.append(f"{label}: name must match {NAME.pattern}")
        for key in ("max_gpus", "max_gpus_per_user", "max_nodes", "priority"):
            value = entry.get(key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                problems.append(f"{label}: {key} must be a non-negative integer")
        if entry.get("max_wall") is not None and not WALL.match(str(entry["max_wall"])):
            problems.append(f"{label}: max_wall must be [D-]HH:MM:SS")
    for value, names in _duplicates(qos, "name").items():
        problems.append(f"cluster_users_qos: name {value} is used by more than one QOS ({', '.join(names)})")
    return problems


def _user_entry_problems(
    label: str, user: Mapping[str, Any], known: Mapping[str, set[Any] | None]
) -> list[str]:
    """One user's rules; absent users need only a name (the rest is not read when removing)."""
    problems = []
    if not NAME.match(str(user.get("name", ""))):
        problems.append(f"{label}: name must match {NAME.pattern}")
    state = user.get("state", "present")
    if state not in STATES:
        return [*problems, f"{label}: state must be one of {', '.join(STATES)}"]
    if state == "absent":
        return problems
    for key in ("uid", "gid") if known["gids"] is not None else ():
        if not isinstance(user.get(key), int) or isinstance(user.get(key), bool):
            problems.append(f"{label}: {key} must be an integer")
    if known["gids"] is not None and isinstance(user.get("gid"), int) and user["gid"] not in known["gids"]:
        problems.append(f"{label}: gid {user['gid']} is not the gid of a group in cluster_users_groups")
    for group in user.get("groups") or [] if known["groups"] is not None else []:
        if group not in known["groups"]:
            problems.append(f"{label}: group {group} is not in cluster_users_groups")
    for name in _as_list(user.get("qos")):
        if name not in known["qos"]:
            problems.append(f"{label}: QOS {name} is not in cluster_users_qos")
    if user.get("account") is not None and known["accounts"] and user["account"] not in known["accounts"]:
        problems.append(f"{label}: account {user['account']} is not in cluster_users_accounts")
    if user.get("ssh_key"):
        why = ssh_key_problem(str(user["ssh_key"]))
        if why:
            problems.append(f"{label}: ssh_key {why}")
    return problems


def _as_list(value: Any) -> list[str]:
    """A QOS given as one name or a list, as a list."""
    if value is None:
        return []
    return [str(value)] if isinstance(value, str) else [str(item) for item in value]


def user_list_problems(
    users: list[Mapping[str, Any]],
    groups: list[Mapping[str, Any]] | None = None,
    qos: list[Mapping[str, Any]] | None = None,
    accounts: list[Mapping[str, Any]] | None = None,
) -> list[str]:
    """Every broken rule of the user list and the lists it refers to, each naming its entry; empty when the
    lists can be applied. Groups None: the directory is not written (accounting alone), so uids, gids and
    groups are not checked."""
    qos, accounts = list(qos or []), list(accounts or [])
    problems = group_problems(list(groups)) if groups is not None else []
    problems += qos_problems(qos)
    known = {
        "gids": None if groups is None else {group.get("gid") for group in groups},
        "groups": None if groups is None else {str(group.get("name")) for group in groups},
        "qos": {str(entry.get("name")) for entry in qos},
        "accounts": {str(entry.get("name")) for entry in accounts},
    }
    for index, user in enumerate(users):
        label = f"cluster_users_list[{index}] ({user.get('name')})"
        problems += _user_entry_problems(label, user, known)
    present = [user for user in users if user.get("state", "present") == "present"]
    for key in ("name", "uid"):
        for value, names in _duplicates(present if key == "uid" else users, key).items():
            problems.append(
                f"cluster_users_list: {key} {value} is used by more than one user ({', '.join(names)})"
            )
    return problems


def group_members(users: list[Mapping[str, Any]], groups: list[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Each listed group's memberUid values: the present users that name it (sorted, so that a rerun compares
    equal)."""
    members: dict[str, list[str]] = {str(group["name"]): [] for group in groups}
    for user in users:
        if user.get("state", "present") != "present":
            continue
        for group in user.get("groups") or []:
            members.setdefault(str(group), []).append(str(user["name"]))
    return {name: sorted(set(names)) for name, names in members.items()}


def _qos_wanted(entry: Mapping[str, Any]) -> dict[str, str]:
    """sacctmgr's QOS settings for one entry, keyed by the `show qos` field that reads each back."""
    wanted = {}
    if entry.get("priority") is not None:
        wanted["Priority"] = str(entry["priority"])
    if entry.get("max_wall") is not None:
        wanted["MaxWall"] = str(entry["max_wall"])
    if entry.get("max_nodes") is not None:
        wanted["MaxTRES"] = f"node={entry['max_nodes']}"
    if entry.get("max_gpus_per_user") is not None:
        wanted["MaxTRESPU"] = f"gres/gpu={entry['max_gpus_per_user']}"
    if entry.get("max_gpus") is not None:
        wanted["GrpTRES"] = f"gres/gpu={entry['max_gpus']}"
    return wanted


QOS_FORMAT = ("Name", "Priority", "MaxWall", "MaxTRES", "MaxTRESPU", "GrpTRES")
QOS_SET_KEYS = {"MaxTRES": "MaxTRESPerJob", "MaxTRESPU": "MaxTRESPerUser"}
ASSOC_FORMAT = ("Account", "User", "Fairshare", "QOS", "DefaultQOS")


def _parsed(lines: Iterable[str], fields: tuple[str, ...]) -> list[dict[str, str]]:
    """`sacctmgr --noheader --parsable2` lines as dicts of the asked-for fields."""
    return [dict(zip(fields, line.split("|"), strict=False)) for line in lines if line.strip()]


def qos_commands(qos: list[Mapping[str, Any]], shown: Iterable[str]) -> list[list[str]]:
    """The sacctmgr calls that bring the QOS table to the list: add the missing, modify the different,
    nothing when `shown` (format QOS_FORMAT) already matches."""
    current = {row["Name"]: row for row in _parsed(shown, QOS_FORMAT)}
    commands = []
    for entry in qos:
        wanted = _qos_wanted(entry)
        row = current.get(str(entry["name"]))
        settings = [f"{QOS_SET_KEYS.get(key, key)}={value}" for key, value in wanted.items()]
        if row is None:
            commands.append(["sacctmgr", "--immediate", "add", "qos", str(entry["name"]), *settings])
        elif any(row.get(key, "") != value for key, value in wanted.items()):
            commands.append(
                [
                    "sacctmgr",
                    "--immediate",
                    "modify",
                    "qos",
                    "where",
                    f"name={entry['name']}",
                    "set",
                    *settings,
                ]
            )
    return commands


def _accounts(users: list[Mapping[str, Any]], accounts: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The listed accounts, plus any account a present user names that the list leaves out."""
    found = [dict(entry) for entry in accounts]
    names = {entry["name"] for entry in found}
    for user in users:
        if user.get("state", "present") == "present" and user.get("account") and user["account"] not in names:
            found.append({"name": user["account"]})
            names.add(user["account"])
    return found


def association_commands(
    users: list[Mapping[str, Any]],
    accounts: list[Mapping[str, Any]],
    shown: Iterable[str],
    cluster: str,
) -> list[list[str]]:
    """The sacctmgr calls that bring accounts and user associations to the list (format ASSOC_FORMAT rows in
    `shown`): add what is missing, modify fair share and QOS where they differ, delete the users marked
    absent."""
    rows = _parsed(shown, ASSOC_FORMAT)
    by_key = {(row["Account"], row["User"]): row for row in rows}
    commands = []
    for account in _accounts(users, accounts):
        share = str(account.get("fairshare", 1))
        row = by_key.get((account["name"], ""))
        if row is None:
            commands.append(
                [
                    "sacctmgr",
                    "--immediate",
                    "add",
                    "account",
                    account["name"],
                    f"Cluster={cluster}",
                    f"Fairshare={share}",
                ]
            )
        elif row["Fairshare"] != share:
            commands.append(
                [
                    "sacctmgr",
                    "--immediate",
                    "modify",
                    "account",
                    "where",
                    f"name={account['name']}",
                    f"cluster={cluster}",
                    "set",
                    f"Fairshare={share}",
                ]
            )
    listed_users = {row["User"] for row in rows if row["User"]}
    for user in users:
        commands += _user_commands(user, by_key, listed_users, cluster)
    return commands


def _user_commands(
    user: Mapping[str, Any],
    by_key: Mapping[tuple[str, str], Mapping[str, str]],
    listed: set[str],
    cluster: str,
) -> list[list[str]]:
    """One user's association: added, modified or deleted (absent users that have one)."""
    name = str(user["name"])
    if user.get("state", "present") == "absent":
        return (
            [["sacctmgr", "--immediate", "delete", "user", "where", f"name={name}", f"cluster={cluster}"]]
            if name in listed
            else []
        )
    if not user.get("account"):
        return []
    qos = _as_list(user.get("qos"))
    share = str(user.get("fairshare", 1))
    settings = [f"Fairshare={share}"]
    if qos:
        settings += [f"QOS={','.join(qos)}", f"DefaultQOS={qos[0]}"]
    row = by_key.get((str(user["account"]), name))
    if row is None:
        return [
            [
                "sacctmgr",
                "--immediate",
                "add",
                "user",
                name,
                f"Account={user['account']}",
                f"Cluster={cluster}",
                *settings,
            ]
        ]
    same = row["Fairshare"] == share and (
        not qos or (set(row["QOS"].split(",")) == set(qos) and row["DefaultQOS"] == qos[0])
    )
    if same:
        return []
    where = ["where", f"name={name}", f"account={user['account']}", f"cluster={cluster}"]
    return [["sacctmgr", "--immediate", "modify", "user", *where, "set", *settings]]
