# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The tags a cluster's AWS resources carry so that a later reader knows where its data and checkpoints go.

Why tags: every backend the cluster spec renders for (ParallelCluster's configuration, PCS, HyperPod, EKS and
Batch requests) already tags what it makes with the cluster's name and stack, and the readers that find a
cluster later (the ec2_cluster inventory, which the launch runs on) read those tags. A spec's storage defaults
written once here as two more tags need no other channel on any backend. The writer is
module_utils/cluster/storage.py, the reader module_utils/inventory/ec2_cluster_model.py; the launch layer
takes the mapping ``storage_from_tags`` returns. Both sides import this file, so the key names exist once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# Storage default -> tag key. The values are absolute paths on every node of the cluster.
STORAGE_TAGS: dict[str, str] = {
    "data_dir": "trainstack:data-dir",
    "checkpoint_dir": "trainstack:checkpoint-dir",
}
# What a value may be: an absolute path in the characters AWS takes in a tag value (letters, digits, space and
# + - = . _ : / @; at most 256), narrowed to what a shell needs no quoting for and no `..` segment.
PATH = re.compile(r"^/[A-Za-z0-9._/-]{0,255}$")


def path_problem(value: object) -> str:
    """Why a value cannot be a storage default's path, or '' (shared by the spec's rules and the launch's)."""
    if not isinstance(value, str) or not PATH.match(value):
        return "must be an absolute path of letters, digits and . _ / - (at most 256 characters)"
    if ".." in value.split("/"):
        return "must not hold a '..' segment"
    return ""


def storage_tags(defaults: Mapping[str, str]) -> dict[str, str]:
    """The tags of a cluster's storage defaults (``data_dir``, ``checkpoint_dir``); unknown keys are a bug."""
    unknown = sorted(set(defaults) - set(STORAGE_TAGS))
    if unknown:
        raise ValueError(f"not a storage default: {', '.join(unknown)}")
    return {STORAGE_TAGS[key]: value for key, value in defaults.items() if value}


def storage_from_tags(tags: Mapping[str, str] | None) -> dict[str, str]:
    """The storage defaults a resource's tags carry; a value that is not a usable path is left out, so a
    hand-edited tag never reaches a command line."""
    found = {}
    for key, tag in STORAGE_TAGS.items():
        value = (tags or {}).get(tag)
        if value is not None and not path_problem(value):
            found[key] = value
    return found
