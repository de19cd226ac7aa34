"""A fleet shaped like a real account's, as data: regions, clusters of every EC2-backed kind, other instances.

The scale benchmark (bench.inventory.scale) builds it in moto through RunInstances, one call per cluster
queue or node group (ParallelCluster and PCS launch a compute resource or node group as one batch), so moto
holds about as many reservations as an account running these clusters would. The plan is pure data, so
its shape is unit-tested without moto, and a larger fleet extends a smaller one (the 5,000 fleet is the
first part of the 50,000 one), which lets one populated server serve both sizes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

REGIONS = ("us-east-1", "us-west-2", "eu-west-1")
ZONES = ("a", "b", "c")
# Cluster kinds in a cycle of ten: mostly ParallelCluster, then PCS, then plain tagged fleets.
KIND_CYCLE = ("parallelcluster",) * 6 + ("pcs",) * 3 + ("tagged",)
# Node counts in a cycle: small test clusters next to large training ones.
SIZE_CYCLE = (24, 48, 96, 160, 250)
OTHERS_SHARE = 0.1  # instances that belong to no cluster (web servers, notebooks, untagged leftovers)
TAGGED_CLUSTER_TAG = "training-cluster"
TAGGED_ROLE_TAG = "training-role"
TAGGED_QUEUE_TAG = "training-partition"
CLUSTER_PREFIX = "train-"
MAX_BATCH = 1000  # one RunInstances call at most (a ParallelCluster compute resource is no bigger here)


@dataclass(frozen=True, slots=True)
class Batch:
    """One RunInstances call: where, how many, which type, and the tags the service would write."""

    region: str
    zone: str
    count: int
    instance_type: str
    tags: tuple[tuple[str, str], ...]
    cluster: str | None  # None for an instance of no cluster
    kind: str | None


def _split(total: int, parts: int) -> list[int]:
    """`total` into `parts` nearly equal counts, larger ones first."""
    return [total // parts + (1 if index < total % parts else 0) for index in range(parts)]


def _chunks(count: int) -> Iterator[int]:
    while count > 0:
        yield min(count, MAX_BATCH)
        count -= MAX_BATCH


def cluster_batches(index: int, size: int) -> list[Batch]:
    """The RunInstances calls of cluster `index` with `size` nodes, by the tags of its kind."""
    kind = KIND_CYCLE[index % len(KIND_CYCLE)]
    region = REGIONS[index % len(REGIONS)]
    zone = f"{region}{ZONES[(index // len(REGIONS)) % len(ZONES)]}"
    name = f"{CLUSTER_PREFIX}{kind[:3]}-{index:04d}"
    gpu, second, cpu = _split(size - 1, 3)
    batches: list[tuple[int, str, dict[str, str]]] = []
    if kind == "parallelcluster":
        base = {"parallelcluster:cluster-name": name, "parallelcluster:version": "3.13.0"}
        batches.append((1, "c5.4xlarge", {**base, "parallelcluster:node-type": "HeadNode"}))
        for queue, resource, itype, count in (
            ("train", "p5", "p5.48xlarge", gpu),
            ("eval", "p4d", "p4d.24xlarge", second),
            ("cpu", "c5", "c5.24xlarge", cpu),
        ):
            tags = {
                **base,
                "parallelcluster:node-type": "Compute",
                "parallelcluster:queue-name": queue,
                "parallelcluster:compute-resource-name": resource,
            }
            batches.append((count, itype, tags))
    elif kind == "pcs":
        base = {"aws:pcs:cluster-id": name}
        batches.append((1, "c5.4xlarge", {**base, "aws:pcs:compute-node-group-id": "login"}))
        for group, itype, count in (
            ("gpu", "p5.48xlarge", gpu),
            ("gpu-small", "g5.48xlarge", second),
            ("cpu", "c5.24xlarge", cpu),
        ):
            batches.append((count, itype, {**base, "aws:pcs:compute-node-group-id": group}))
    else:
        base = {TAGGED_CLUSTER_TAG: name}
        batches.append((1, "c5.4xlarge", {**base, TAGGED_ROLE_TAG: "head"}))
        for queue, itype, count in (
            ("train", "p5.48xlarge", gpu),
            ("eval", "p4d.24xlarge", second),
            ("cpu", "c5.24xlarge", cpu),
        ):
            batches.append((count, itype, {**base, TAGGED_ROLE_TAG: "compute", TAGGED_QUEUE_TAG: queue}))
    return [
        Batch(region, zone, part, itype, tuple(tags.items()), name, kind)
        for count, itype, tags in batches
        for part in _chunks(count)
    ]


def other_batches(count: int, start: int) -> list[Batch]:
    """Instances of no cluster, spread over the regions: half untagged, half tagged by their owners."""
    out = []
    for offset, part in enumerate(_split(count, 2 * len(REGIONS))):
        region = REGIONS[offset % len(REGIONS)]
        zone = f"{region}{ZONES[(start + offset) % len(ZONES)]}"
        tags: tuple[tuple[str, str], ...] = ()
        if offset % 2:
            tags = (("team", "web"), ("Name", f"web-{start + offset}"))
        out.extend(Batch(region, zone, n, "m5.large", tags, None, None) for n in _chunks(part) if n)
    return out


def plan(instances: int, first_cluster: int = 0) -> list[Batch]:
    """About `instances` instances: clusters from index `first_cluster` up, plus OTHERS_SHARE of others.

    The last cluster is trimmed so the total is exact. plan(a) followed by plan(b - a, first_cluster=k),
    with k the number of clusters plan(a) made, is the fleet of size b built in two steps.
    """
    others = round(instances * OTHERS_SHARE)
    wanted = instances - others
    batches: list[Batch] = []
    index = first_cluster
    while wanted > 0:
        size = min(SIZE_CYCLE[index % len(SIZE_CYCLE)], wanted)
        if size < 4:  # too small for head + three queues; give the rest to the others
            others += size
            break
        batches.extend(cluster_batches(index, size))
        wanted -= size
        index += 1
    batches.extend(other_batches(others, first_cluster))
    return batches


def summary(batches: list[Batch]) -> dict[str, object]:
    """What a plan holds, for the result file and for checking the inventories against it."""
    clusters = {b.cluster: b.kind for b in batches if b.cluster}
    per_kind: dict[str, int] = {}
    for kind in clusters.values():
        per_kind[str(kind)] = per_kind.get(str(kind), 0) + 1
    return {
        "instances": sum(b.count for b in batches),
        "cluster_nodes": sum(b.count for b in batches if b.cluster),
        "other_instances": sum(b.count for b in batches if not b.cluster),
        "clusters": len(clusters),
        "clusters_per_kind": per_kind,
        "run_instances_calls": len(batches),
        "regions": sorted({b.region for b in batches}),
    }
