# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Filters that find a cluster's hosts in an inventory made by the ec2_cluster plugin (or written by hand).

Why a filter: launch_training, validate_cluster and nccl_acceptance all turn "the cluster called X" into
hosts the same way the inventory plugin named its groups (cluster_<name>, cluster_<name>_head, role_head), and
to say the same clear thing when the name matches no cluster or several heads. One function keeps the three
playbooks and the plugin in step: the group names come from the plugin's own module_utils.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.ec2_cluster_model import safe_group

CLUSTER_PREFIX = "cluster_"


def cluster_group(name: str, role: str = "") -> str:
    """The group the inventory plugin makes for a cluster (and for one node role of it)."""
    group = f"{CLUSTER_PREFIX}{safe_group(str(name))}"
    return f"{group}_{safe_group(str(role))}" if role else group


def _clusters(groups: Mapping[str, Sequence[str]]) -> list[str]:
    """Names of the clusters in the inventory, from their cluster_<name>_head groups."""
    return sorted(
        g[len(CLUSTER_PREFIX) : -len("_head")]
        for g in groups
        if g.startswith(CLUSTER_PREFIX) and g.endswith("_head")
    )


def cluster_head(groups: Mapping[str, Sequence[str]], cluster: str = "") -> dict[str, str]:
    """The one head host of a cluster: ``{host, error}``, where exactly one of the two is empty.

    Without a cluster name, a hand-written inventory's ``head`` group wins, then the plugin's ``role_head``
    (which holds the heads of every cluster it found, so more than one asks for a name).
    """
    if cluster:
        group = cluster_group(cluster, "head")
        heads = list(groups.get(group, []))
        if not heads:
            known = ", ".join(_clusters(groups)) or "none"
            return {
                "host": "",
                "error": f"cluster={cluster}: no group {group} in the inventory (clusters: {known})",
            }
        source = f"Cluster {cluster} ({group})"
    else:
        heads = list(groups.get("head") or groups.get("role_head") or [])
        if not heads:
            return {"host": "", "error": "The inventory has no head host (group head or role_head)"}
        source = "The inventory"
    if len(heads) > 1:
        hint = (
            ""
            if cluster
            else f"; pick one with -e cluster=<name> (clusters: {', '.join(_clusters(groups)) or 'none'})"
        )
        return {
            "host": "",
            "error": f"{source} has {len(heads)} head hosts ({', '.join(heads)}), one is needed{hint}",
        }
    return {"host": heads[0], "error": ""}


class FilterModule:
    """trainstack.cluster inventory filters."""

    def filters(self) -> dict[str, Any]:
        return {"cluster_group": cluster_group, "cluster_head": cluster_head}
