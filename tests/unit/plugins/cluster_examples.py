"""What the cluster renderers' tests share: the example cluster specs and a foundation record's outputs.

ParallelCluster and PCS render from the same spec and the same foundation; each test adds only the outputs its
renderer reads beyond these.
"""

from __future__ import annotations

from typing import Any

from tests.support import REPO

EXAMPLE_SPECS = {p.stem: p for p in sorted((REPO / "inventories" / "aws" / "clusters").glob("*.yml"))}
FOUNDATION: dict[str, Any] = {
    "subnet_public": "subnet-0a0a0a0a0a0a0a0a0",
    "subnet_private": "subnet-0b0b0b0b0b0b0b0b0",
    "security_group": "sg-0c0c0c0c0c0c0c0c0",
    "bucket": "trainstack-test-cluster",
    "bundle_sha256": "ab" * 32,
}
AMI = "ami-0d0d0d0d0d0d0d0d0"
