# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Filters over the cluster's user list (module_utils/slurm/cluster_users): its rules, the directory's group
members and the sacctmgr calls that bring Slurm accounting to it.

Why filters: the cluster_users and slurm_accounting roles read one list; its rules and the comparison with
what sacctmgr shows live in Python with unit tests instead of in Jinja.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.slurm.cluster_users import (
    association_commands,
    group_members,
    qos_commands,
    user_list_problems,
)


def cluster_user_problems(
    users: list[Any], groups: Any = None, qos: Any = None, accounts: Any = None
) -> list[str]:
    """Every broken rule of the lists, each naming its entry (empty: the lists can be applied)."""
    return user_list_problems(list(users or []), groups, qos, accounts)


def cluster_user_group_members(users: list[Any], groups: list[Any]) -> dict[str, list[str]]:
    """Each group's members among the present users."""
    return group_members(list(users or []), list(groups or []))


def slurm_qos_commands(qos: list[Any], shown: list[str]) -> list[list[str]]:
    """sacctmgr calls that add or modify QOS until `sacctmgr show qos` matches the list."""
    return qos_commands(list(qos or []), shown)


def slurm_association_commands(
    users: list[Any], accounts: list[Any], shown: list[str], cluster: str
) -> list[list[str]]:
    """sacctmgr calls that add, modify or delete accounts and user associations to match the list."""
    return association_commands(list(users or []), list(accounts or []), shown, str(cluster))


class FilterModule:
    """The user-list filters."""

    def filters(self) -> dict[str, Any]:
        """Filter names to functions."""
        return {
            "cluster_user_problems": cluster_user_problems,
            "cluster_user_group_members": cluster_user_group_members,
            "slurm_qos_commands": slurm_qos_commands,
            "slurm_association_commands": slurm_association_commands,
        }
