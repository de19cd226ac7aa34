# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""What a cluster spec asks of the account's service quotas, per spec key, and the refusal when it asks too
much.

Why here and not in each backend: the five backends launch the same queues. ParallelCluster, PCS, EKS and
Batch launch EC2 instances, so a queue of `max_count` instances needs `max_count` x the type's vCPUs (the
instance catalog's `vcpus`) of the EC2 quota its class and purchase option count against
(aws/service_quotas.EC2_QUOTAS); HyperPod launches SageMaker cluster instances, so a queue needs
`max_count` of its type's "ml.<type> for cluster usage" quota. Only the compute queues are counted: they are
what grows, and what the quotas of accelerated classes bound.

Not counted, each said in `unchecked` rather than guessed: a Capacity Block queue (its instances are the
reservation's, bought ahead; the reservation, not an On-Demand quota, bounds them), a type whose vCPUs the
catalog does not hold, a class and purchase option without a row in the quota table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.aws import service_quotas
from ansible_collections.trainstack.cluster.plugins.module_utils.aws.service_quotas import Need
from ansible_collections.trainstack.cluster.plugins.module_utils.catalog import instance_catalog

HYPERPOD = "hyperpod"
# The orchestrators the foundation knows (filter cluster_foundation_vars), and the backend playbooks' names.
EC2_BACKENDS = ("parallelcluster", "pcs", "eks", "batch")
BACKENDS = (*EC2_BACKENDS, HYPERPOD)
NOTHING_DONE = "Nothing was created."


@dataclass
class Needs:
    """What the spec's queues need of each quota, and what was left unchecked and why."""

    needs: list[Need] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)


def _ec2_need(where: str, queue: Mapping[str, Any], catalog: instance_catalog.Catalog, found: Needs) -> None:
    itype, count, purchase = queue["instance_type"], int(queue["max_count"]), queue["capacity_type"]
    if purchase not in (service_quotas.ON_DEMAND, service_quotas.SPOT):
        found.unchecked.append(
            f"{where}: a {purchase} queue runs on its reservation, which bounds it; no vCPU quota is checked"
        )
        return
    vcpus = catalog.get(itype).vcpus
    quota = service_quotas.ec2_quota(itype, purchase)
    if not vcpus:
        found.unchecked.append(f"{where}.instance_type: the instance catalog holds no vCPU count of {itype}")
    elif quota is None:
        found.unchecked.append(f"{where}.instance_type: no {purchase} vCPU quota of {itype}'s class is known")
    elif count > 0:
        why = f"{count} x {itype} at {vcpus} vCPUs ({purchase.replace('_', '-')})"
        found.needs.append(Need(quota, f"{where}.max_count", count * vcpus, why))


def needs(spec: Mapping[str, Any], backend: str, catalog: instance_catalog.Catalog) -> Needs:
    """The needs of the normalised spec's queues on `backend` (ParallelCluster, PCS, EKS, Batch: EC2's vCPU
    quotas; HyperPod: SageMaker's per-type instance quotas)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend: {backend!r} is not one of {', '.join(BACKENDS)}")
    found = Needs()
    for index, queue in enumerate(spec["queues"]):
        where = f"queues[{index}]"
        if backend == HYPERPOD:
            count = int(queue["max_count"])
            if count > 0:
                quota = service_quotas.sagemaker_cluster_quota(queue["instance_type"])
                why = f"{count} x {quota.name.removesuffix(' for cluster usage')}"
                found.needs.append(Need(quota, f"{where}.max_count", count, why))
        else:
            _ec2_need(where, queue, catalog, found)
    return found


def refusal(refusals: list[str], nothing_done: str = NOTHING_DONE) -> str:
    """One message for every quota the spec is over, ending with what was not done."""
    return (
        "The cluster spec asks for more than the account's quotas allow: "
        + " ".join(refusals)
        + (f" {nothing_done}" if nothing_done else "")
    )
