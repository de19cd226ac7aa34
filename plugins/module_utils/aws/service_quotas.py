# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The account's service quotas that bound a cluster, read before anything is created, and the verdict.

Why: EC2 counts running instances against a vCPU quota per instance class and purchase option (On-Demand P
instances, G and VT, Trn, the standard classes, and the same for Spot), and SageMaker HyperPod counts each
`ml.` type against its own "<type> for cluster usage" quota. A cluster whose queues can grow past the quota
was found out only when the scheduler first scaled a queue up (InsufficientInstanceCapacity, "You have
requested more vCPU capacity than your current vCPU limit"), long after the VPC, the file system and the
cluster existed. Reading the quota first turns that into a refusal that names the spec key.

The family-to-quota mapping is ONE table, EC2_QUOTAS, from EC2's quota pages (On-Demand and Spot Instance
quotas in the EC2 User Guide) and the Service Quotas codes they list. A class without a row (an F, X or DL
Spot queue, P6 Spot) is not guessed: it is reported as unchecked.

What cannot be read does not refuse: a quota the Service Quotas API does not answer (no endpoint, no
permission, no such quota, a throttled or failing call) is a warning naming the quota and what the spec
needs, and the run goes on. The quota is an upper bound of what may run at once in the region, and other
instances of the account count against it too; comparing the spec's own maximum with the quota is the one
check that holds whatever else runs, so that is the refusal (a spec that fits may still meet a full quota).

A base-layer module: the standard library, and botocore's exceptions where botocore is installed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

try:
    from botocore.exceptions import BotoCoreError, ClientError
except ImportError:  # pragma: no cover - AnsibleAWSModule reports a missing botocore itself
    BotoCoreError = ClientError = None

EC2, SAGEMAKER = "ec2", "sagemaker"
ON_DEMAND, SPOT = "on_demand", "spot"
VCPUS, INSTANCES = "vCPUs", "instances"


@dataclass(frozen=True)
class Quota:
    """One quota of Service Quotas: by code (EC2's), or by name where each instance type has its own code
    that no page lists (SageMaker's "ml.<type> for cluster usage")."""

    service: str
    code: str
    name: str
    unit: str

    def label(self) -> str:
        return (
            f"'{self.name}' ({self.service} {self.code})" if self.code else f"'{self.name}' ({self.service})"
        )


@dataclass(frozen=True)
class QuotaRow:
    """Instances of the families `family` (a regex from the start of the family name) matches, bought as
    `purchase`, count their vCPUs against `quota`."""

    purchase: str
    family: str
    quota: Quota


def _od(code: str, name: str) -> Quota:
    return Quota(EC2, code, f"Running On-Demand {name} instances", VCPUS)


def _spot(code: str, name: str) -> Quota:
    return Quota(EC2, code, f"All {name} Spot Instance Requests", VCPUS)


# The standard classes: the letters before the generation digit (m7i, c7gn, i4i, im4gn, is4gen, r7iz, z1d).
STANDARD = r"(?:a|c|d|h|i|im|is|m|r|t|z)\d"
# The one table; the first row of the purchase option whose regex matches the family wins. The letters are
# followed by the generation digit, so trn2 is not t, inf2 not i, hpc7g not h, dl1 not d, mac2 nothing.
# Sources: the EC2 User Guide's On-Demand and Spot Instance quota pages (names), with the codes Service
# Quotas lists for them; P5 Spot has its own quota, P6 Spot has no row here yet (reported as unchecked).
EC2_QUOTAS: tuple[QuotaRow, ...] = (
    QuotaRow(ON_DEMAND, r"p\d", _od("L-417A185B", "P")),
    QuotaRow(ON_DEMAND, r"(?:g|gr|vt)\d", _od("L-DB2E81BA", "G and VT")),
    QuotaRow(ON_DEMAND, r"trn\d", _od("L-2C3B7624", "Trn")),
    QuotaRow(ON_DEMAND, r"inf\d", _od("L-1945791B", "Inf")),
    QuotaRow(ON_DEMAND, r"dl\d", _od("L-6E869C2A", "DL")),
    QuotaRow(ON_DEMAND, r"f\d", _od("L-74FC7D96", "F")),
    QuotaRow(ON_DEMAND, r"x\d", _od("L-7295265B", "X")),
    QuotaRow(ON_DEMAND, r"u[\d-]", _od("L-43DA4232", "High Memory")),
    QuotaRow(ON_DEMAND, r"hpc\d", _od("L-F7808C92", "HPC")),
    QuotaRow(ON_DEMAND, STANDARD, _od("L-1216C47A", "Standard (A, C, D, H, I, M, R, T, Z)")),
    QuotaRow(SPOT, r"p[234]", _spot("L-7212CCBC", "P4, P3 and P2")),
    QuotaRow(SPOT, r"p5", _spot("L-C4BD4855", "P5")),
    QuotaRow(SPOT, r"(?:g|gr|vt)\d", _spot("L-3819A6DF", "G and VT")),
    QuotaRow(SPOT, r"trn\d", _spot("L-6B0D517C", "Trn")),
    QuotaRow(SPOT, r"inf\d", _spot("L-B5D1601B", "Inf")),
    QuotaRow(SPOT, STANDARD, _spot("L-34B43A08", "Standard (A, C, D, H, I, M, R, T, Z)")),
)


def ec2_quota(instance_type: str, purchase: str) -> Quota | None:
    """The vCPU quota `instance_type` bought as `purchase` counts against; None where the table has no row."""
    family = instance_type.split(".", 1)[0]
    for row in EC2_QUOTAS:
        if row.purchase == purchase and re.match(row.family, family):
            return row.quota
    return None


def sagemaker_cluster_quota(instance_type: str) -> Quota:
    """HyperPod's per-type instance quota; its code differs by type and is found by this name."""
    ml = instance_type if instance_type.startswith("ml.") else f"ml.{instance_type}"
    return Quota(SAGEMAKER, "", f"{ml} for cluster usage", INSTANCES)


# ---------------------------------------------------------------- what the spec needs, and what was read


@dataclass(frozen=True)
class Need:
    """What one spec key needs of one quota: `amount` in the quota's unit, `why` in words."""

    quota: Quota
    key: str
    amount: int
    why: str


@dataclass(frozen=True)
class Reading:
    """A quota as read: its value and whether AWS applied it to the account or it is the default; or, with
    no value, why it could not be read."""

    quota: Quota
    value: float | None = None
    code: str = ""
    source: str = ""
    problem: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "service": self.quota.service,
            "code": self.code or self.quota.code,
            "name": self.quota.name,
            "unit": self.quota.unit,
            "value": self.value,
            "source": self.source,
            "problem": self.problem,
        }


def _error_text(error: BaseException) -> str:
    """The error's code and the first line of its message (a proxy's or server's page is no message)."""
    if ClientError is not None and isinstance(error, ClientError):
        detail = error.response.get("Error", {})
        text = f"{detail.get('Code', 'error')}: {detail.get('Message', '')}"
    else:
        text = f"{type(error).__name__}: {error}"
    lines = text.strip().splitlines() or [""]
    return lines[0][:200].rstrip(": ")


def _is_code(error: BaseException, code: str) -> bool:
    return (
        ClientError is not None
        and isinstance(error, ClientError)
        and error.response.get("Error", {}).get("Code") == code
    )


def read_by_code(client: Any, quota: Quota) -> Reading:
    """GetServiceQuota (the value applied to the account); where Service Quotas holds none for the account
    (NoSuchResourceException), GetAWSDefaultServiceQuota. Any other failure is the reading's problem."""
    try:
        answer = client.get_service_quota(ServiceCode=quota.service, QuotaCode=quota.code)
        return Reading(quota, float(answer["Quota"]["Value"]), quota.code, "applied")
    except (BotoCoreError, ClientError) as error:
        if not _is_code(error, "NoSuchResourceException"):
            return Reading(quota, problem=_error_text(error))
        first = _error_text(error)
    try:
        answer = client.get_aws_default_service_quota(ServiceCode=quota.service, QuotaCode=quota.code)
        return Reading(quota, float(answer["Quota"]["Value"]), quota.code, "AWS default")
    except (BotoCoreError, ClientError) as error:
        return Reading(quota, problem=f"{first}; default: {_error_text(error)}")


def read_by_name(client: Any, service: str, quotas: Iterable[Quota]) -> list[Reading]:
    """ListServiceQuotas of `service`, every page, each wanted quota found by its name; a quota the list
    does not hold is a reading with a problem."""
    wanted = list(dict.fromkeys(quotas))
    try:
        found: dict[str, Mapping[str, Any]] = {}
        for page in client.get_paginator("list_service_quotas").paginate(ServiceCode=service):
            found.update({item["QuotaName"]: item for item in page.get("Quotas", [])})
    except (BotoCoreError, ClientError) as error:
        return [Reading(quota, problem=_error_text(error)) for quota in wanted]
    readings = []
    for quota in wanted:
        item = found.get(quota.name)
        if item is None or item.get("Value") is None:
            readings.append(
                Reading(quota, problem=f"ListServiceQuotas of {service} has no quota of this name")
            )
        else:
            readings.append(Reading(quota, float(item["Value"]), str(item.get("QuotaCode", "")), "applied"))
    return readings


def read(client: Any, quotas: Iterable[Quota]) -> list[Reading]:
    """Every quota once: by code where it has one, else by name (one listing per service)."""
    unique = list(dict.fromkeys(quotas))
    readings = [read_by_code(client, quota) for quota in unique if quota.code]
    by_name: dict[str, list[Quota]] = {}
    for quota in unique:
        if not quota.code:
            by_name.setdefault(quota.service, []).append(quota)
    for service, named in by_name.items():
        readings += read_by_name(client, service, named)
    return readings


# ---------------------------------------------------------------- the verdict


@dataclass
class Verdict:
    """Refusals (a need over a quota that was read), warnings (a quota that could not be read) and every
    quota compared, for the module's result."""

    refusals: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    compared: list[dict[str, Any]] = field(default_factory=list)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def verdict(needs: Iterable[Need], readings: Iterable[Reading], region: str) -> Verdict:
    """Each quota's needs added up (queues of one class share its quota) and held to the value read."""
    grouped: dict[Quota, list[Need]] = {}
    for need in needs:
        grouped.setdefault(need.quota, []).append(need)
    read_of = {reading.quota: reading for reading in readings}
    result = Verdict()
    for quota, items in grouped.items():
        total = sum(need.amount for need in items)
        keys = ", ".join(need.key for need in items)
        whys = "; ".join(f"{need.key}: {need.why}" for need in items)
        reading = read_of.get(quota, Reading(quota, problem="not read"))
        result.compared.append({**reading.as_dict(), "needed": total, "keys": [n.key for n in items]})
        if reading.value is None:
            result.warnings.append(
                f"{keys}: the quota {quota.label()} in {region} could not be read ({reading.problem}); "
                f"the spec needs {total} {quota.unit} of it ({whys}), not checked."
            )
        elif total > reading.value:
            code = f" {reading.code}" if reading.code and not quota.code else ""
            result.refusals.append(
                f"{keys}: needs {total} {quota.unit} ({whys}); the quota {quota.label()}{code} in "
                f"{region} is {_number(reading.value)} ({reading.source}). Lower max_count or ask for an "
                "increase in Service Quotas."
            )
    return result
