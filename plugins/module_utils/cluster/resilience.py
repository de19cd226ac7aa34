# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The cluster spec's `resilience:` section: what a cluster does about a failing node and a failed job.

Why one section for five services: every AWS backend has its own word for the same three ideas (find a bad
node, take it out of service and put a new one in, run the interrupted job again), and a user who moves a
spec from ParallelCluster to HyperPod should keep the behaviour without learning a second vocabulary. The
section says what is wanted; the functions below say how each service spells it, and only with fields its
API or schema has (ParallelCluster 3.16's cluster schema, the pinned botocore's SageMaker, PCS, EKS and Batch
models). What a service cannot do is either refused here, naming `resilience.<field>` (asking it of the
service would mislead), or reported as not rendered with the reason (the service does it anyway, or another
part of the product does it). docs/resilience.md tables the same mapping for users.

Fields and defaults (DEFAULTS): the cheap mechanisms are on, the slow one is off.

- health_checks (true): check each node's GPUs before jobs run on it.
- replace_unhealthy_nodes (true): a node found faulty is replaced by a new instance.
- deep_health_checks ([]): longer checks when an instance starts, before it takes jobs; `gpu_stress` (GPU
  stress and diagnostics) and `connectivity` (the node's links to its peers). They add minutes to every
  launch, so they are asked for, not assumed.
- auto_resume (true): a job a node failure interrupts runs again from its last checkpoint.
- max_job_restarts (2): how often one job is started again; the launch's `training_job_max_restarts`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

# The neutral names of the deep checks and what each service calls them; None: the service has no such check.
DEEP_HEALTH_CHECKS = ("gpu_stress", "connectivity")
HYPERPOD_DEEP_CHECKS = {"gpu_stress": "InstanceStress", "connectivity": "InstanceConnectivity"}
# PCS's deep health check profile LONG runs "GPU stress and diagnostic tests" (DCGM diagnostics level 3).
PCS_DEEP_PROFILE = {"gpu_stress": "LONG", "connectivity": None}
# PCS instance health checks need this Slurm release or later (the PCS model's InstanceHealthChecks).
PCS_HEALTH_CHECKS_SLURM = "26.05"
# Batch runs a job at most 10 times (RetryStrategy.attempts, 1 to 10): the first run and 9 restarts.
MAX_JOB_RESTARTS = 9
# HyperPod's Slurm plugin restarts a step started with this srun flag once its node is replaced (the
# training loads its last checkpoint).
HYPERPOD_AUTO_RESUME_ARGS = ("--auto-resume=1",)
# Batch: retry when the instance went away under the job (EC2 reclaimed or failed it), exit on anything else
# (a failing training script would fail again). The AWS Batch user guide's automated retry example.
BATCH_EVALUATE_ON_EXIT = (
    {"onStatusReason": "Host EC2*", "action": "RETRY"},
    {"onReason": "*", "action": "EXIT"},
)

DEFAULTS: dict[str, Any] = {
    "health_checks": True,
    "replace_unhealthy_nodes": True,
    "deep_health_checks": [],
    "auto_resume": True,
    "max_job_restarts": 2,
}

SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "What the cluster does about failing nodes and interrupted jobs (docs/resilience.md).",
    "additionalProperties": False,
    "properties": {
        "health_checks": {
            "type": "boolean",
            "description": "default: true. Check each node's GPUs before jobs run on it.",
        },
        "replace_unhealthy_nodes": {
            "type": "boolean",
            "description": "default: true. Replace a node a check finds faulty with a new instance.",
        },
        "deep_health_checks": {
            "type": "array",
            "items": {"type": "string", "enum": list(DEEP_HEALTH_CHECKS)},
            "description": "default: []. Checks each instance runs when it starts, before it takes jobs.",
        },
        "auto_resume": {
            "type": "boolean",
            "description": "default: true. Run a job a node failure interrupted again, from its checkpoint.",
        },
        "max_job_restarts": {
            "type": "integer",
            "minimum": 0,
            "maximum": MAX_JOB_RESTARTS,
            "description": "default: 2. Restarts of one job (the launch's training_job_max_restarts).",
        },
    },
}


# ---------------------------------------------------------------- the spec's section


def with_defaults(section: Mapping[str, Any] | None) -> dict[str, Any]:
    """The section with every field filled; a spec without one gets DEFAULTS."""
    out = copy.deepcopy(DEFAULTS)
    out.update(copy.deepcopy(dict(section or {})))
    if not out["auto_resume"]:
        out["max_job_restarts"] = 0
    return out


def of(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The spec's section with its defaults (a normalised spec has them already; a renderer may be handed a
    spec made by hand, as the tests do)."""
    return with_defaults(spec.get("resilience"))


def problems(section: Mapping[str, Any] | None) -> list[str]:
    """Rules the schema cannot state, on the section as written (after the schema passed it)."""
    given = dict(section or {})
    found = []
    checks = list(given.get("deep_health_checks") or [])
    for index, name in enumerate(checks):
        if name in checks[:index]:
            found.append(f"resilience.deep_health_checks[{index}]: {name!r} is already listed")
    if given.get("auto_resume") is False and given.get("max_job_restarts"):
        found.append(
            f"resilience.max_job_restarts: {given['max_job_restarts']} restarts but auto_resume is false, "
            "so no job is started again; remove it or set auto_resume: true"
        )
    return found


def launch_vars(section: Mapping[str, Any]) -> dict[str, Any]:
    """The launch's variables from the spec: how often a job is requeued (0, never, without auto_resume)."""
    return {"training_job_max_restarts": int(section["max_job_restarts"]) if section["auto_resume"] else 0}


def hyperpod_srun_args(section: Mapping[str, Any]) -> list[str]:
    """srun flags of a job step on HyperPod: with auto_resume, HyperPod restarts the step on the replaced
    node itself, without waiting for Slurm to requeue the whole job."""
    return list(HYPERPOD_AUTO_RESUME_ARGS) if section["auto_resume"] else []


# ---------------------------------------------------------------- ParallelCluster 3


def pcluster_problems(section: Mapping[str, Any]) -> list[str]:
    """ParallelCluster's clustermgtd replaces every compute node Slurm marks DOWN or DRAINED, and its cluster
    schema (3.16) has no setting that keeps one; accepting `false` would promise what the cluster won't do."""
    if section["replace_unhealthy_nodes"]:
        return []
    return [
        "resilience.replace_unhealthy_nodes: ParallelCluster always replaces a compute node Slurm marks down "
        "or drained (clustermgtd), and its configuration has no setting to keep it; set it to true"
    ]


def pcluster_queue(section: Mapping[str, Any]) -> dict[str, Any]:
    """SlurmQueues[].HealthChecks: ParallelCluster's GPU check (DCGM) in the prolog of each job's nodes."""
    return {"HealthChecks": {"Gpu": {"Enabled": bool(section["health_checks"])}}}


def node_bootstrap_args(section: Mapping[str, Any]) -> list[str]:
    """Extra arguments of the head node's bootstrap: it installs our node_health prolog and epilog for every
    node unless the spec turns health checks off."""
    return [] if section["health_checks"] else ["-e", "node_bootstrap_health_hooks=false"]


# ---------------------------------------------------------------- SageMaker HyperPod


def hyperpod_cluster(section: Mapping[str, Any]) -> dict[str, Any]:
    """CreateCluster NodeRecovery: Automatic reboots or replaces a faulty node; None leaves it."""
    return {"NodeRecovery": "Automatic" if section["replace_unhealthy_nodes"] else "None"}


def hyperpod_worker_group(section: Mapping[str, Any]) -> dict[str, Any]:
    """A worker group's OnStartDeepHealthChecks, in the spec's order; none when none are asked for."""
    checks = [HYPERPOD_DEEP_CHECKS[name] for name in section["deep_health_checks"]]
    return {"OnStartDeepHealthChecks": checks} if checks else {}


def hyperpod_not_rendered(section: Mapping[str, Any]) -> list[str]:
    lines = []
    if not section["health_checks"]:
        lines.append(
            "resilience.health_checks: HyperPod's health-monitoring agent runs on every node and cannot be "
            "turned off, and the lifecycle script installs the node_health prolog whatever the spec says"
        )
    if section["auto_resume"]:
        lines.append(
            "resilience.auto_resume: no CreateCluster field; HyperPod resumes a job step started with srun "
            f"{' '.join(HYPERPOD_AUTO_RESUME_ARGS)}, and the launch requeues a job at most "
            f"{section['max_job_restarts']} times (training_job_max_restarts)"
        )
    return lines


# ---------------------------------------------------------------- AWS PCS


def pcs_offers_health_checks(slurm_version: str) -> bool:
    """Whether a PCS cluster of this Slurm release (major.minor) takes instanceHealthChecks."""

    def release(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in version.split(".")[:2])

    try:
        return release(slurm_version) >= release(PCS_HEALTH_CHECKS_SLURM)
    except ValueError:
        return False


def pcs_health_checks(section: Mapping[str, Any], *, gpus: bool) -> dict[str, Any]:
    """CreateComputeNodeGroup instanceHealthChecks of a queue's node group.

    Health monitoring is STANDARD or NONE; a fault found is repaired by REPLACE, or ISOLATE (no new jobs, the
    instance kept for inspection) when the spec keeps unhealthy nodes. The deep check runs only on NVIDIA GPU
    types (PCS refuses a profile elsewhere)."""
    action = "REPLACE" if section["replace_unhealthy_nodes"] else "ISOLATE"
    checks: dict[str, Any] = {}
    if section["health_checks"]:
        checks["healthMonitoring"] = {"mode": "STANDARD", "repairAction": action}
    else:
        checks["healthMonitoring"] = {"mode": "NONE"}
    if gpus and "gpu_stress" in section["deep_health_checks"]:
        on_start = {"profile": PCS_DEEP_PROFILE["gpu_stress"], "repairAction": action}
        checks["deepHealthChecks"] = {"onStart": on_start}
    return checks


def pcs_not_rendered(section: Mapping[str, Any], slurm_version: str) -> list[str]:
    if not pcs_offers_health_checks(slurm_version):
        wanted = section["health_checks"] or section["deep_health_checks"]
        if not wanted:
            return []
        return [
            f"resilience.health_checks: PCS takes instance health checks (instanceHealthChecks) from Slurm "
            f"{PCS_HEALTH_CHECKS_SLURM} on; this cluster runs Slurm {slurm_version}, so none are rendered"
        ]
    lines = []
    if "connectivity" in section["deep_health_checks"]:
        lines.append(
            "resilience.deep_health_checks: PCS has no connectivity check at start (GPU profiles only)"
        )
    return lines


# ---------------------------------------------------------------- Amazon EKS


def eks_node_repair(section: Mapping[str, Any]) -> dict[str, Any]:
    """CreateNodegroup nodeRepairConfig: EKS replaces or reboots nodes its node monitoring agent reports."""
    return {"enabled": bool(section["replace_unhealthy_nodes"])}


def eks_not_rendered(section: Mapping[str, Any]) -> list[str]:
    lines = []
    if section["health_checks"]:
        lines.append(
            "resilience.health_checks: GPU faults reach node auto repair through the EKS node monitoring "
            "agent add-on (eks-node-monitoring-agent), installed in the cluster, not by CreateNodegroup"
        )
    if section["deep_health_checks"]:
        lines.append("resilience.deep_health_checks: EKS managed node groups run no checks at start")
    if section["auto_resume"]:
        lines.append(
            "resilience.auto_resume: no node group field; restarting a job is the launch's part "
            "(training_job_max_restarts)"
        )
    return lines


# ---------------------------------------------------------------- AWS Batch


def batch_retry_strategy(section: Mapping[str, Any]) -> dict[str, Any]:
    """RegisterJobDefinition retryStrategy: with auto_resume, a job whose host went away runs again (the
    first run and max_job_restarts more); a job that failed by itself is not retried."""
    if not section["auto_resume"]:
        return {"attempts": 1}
    return {
        "attempts": 1 + int(section["max_job_restarts"]),
        "evaluateOnExit": [dict(rule) for rule in BATCH_EVALUATE_ON_EXIT],
    }


def batch_not_rendered(section: Mapping[str, Any]) -> list[str]:
    lines = []
    if section["health_checks"] or section["deep_health_checks"]:
        lines.append(
            "resilience.health_checks, resilience.deep_health_checks: Batch has no setting that checks a "
            "node's GPUs"
        )
    if not section["replace_unhealthy_nodes"]:
        lines.append("resilience.replace_unhealthy_nodes: a Batch compute environment has no setting for it")
    return lines
