"""The smallest valid cluster spec, shared by the tests that change one part of it (the cluster spec's rules,
the storage defaults): one place to edit when the spec's required keys change."""

from __future__ import annotations

import copy
from typing import Any

# One GPU queue under a new VPC, with the image pinned: every key the schema requires, none it may default.
MINIMAL_SPEC: dict[str, Any] = {
    "name": "train-test",
    "region": "us-east-1",
    "availability_zone": "us-east-1a",
    "network": {"vpc": "new"},
    "head_node": {"instance_type": "m7i.2xlarge"},
    "queues": [{"name": "gpu", "instance_type": "p5.48xlarge", "max_count": 2}],
    "image": {"ami_id": "ami-0123456789abcdef0", "os": "ubuntu-24.04", "stack": "ts-2026.10"},
}


def minimal_spec(**parts: Any) -> dict[str, Any]:
    """A copy of MINIMAL_SPEC with top-level parts added or replaced (the caller may change it freely)."""
    return copy.deepcopy({**MINIMAL_SPEC, **parts})
