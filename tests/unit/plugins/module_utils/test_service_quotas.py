"""The account's quotas against a cluster spec (module_utils/aws/service_quotas.py and
cluster/cluster_quotas.py): the one table of EC2 quota codes, what each queue needs, the verdict, and the read
path against a real moto server (whose Service Quotas serves VPC quotas only, and answers an EC2 code with
NoSuchResourceException) with the requests held to botocore's model of the Service Quotas API."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

import pytest
from ansible_collections.trainstack.cluster.plugins.module_utils.aws import service_quotas as sq
from ansible_collections.trainstack.cluster.plugins.module_utils.catalog import instance_catalog
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import cluster_quotas, cluster_spec
from botocore.session import Session
from botocore.validate import ParamValidator

from tests.support import REPO, MotoServer, start_moto
from tests.unit.plugins.cluster_examples import EXAMPLE_SPECS

pytestmark = pytest.mark.cluster

CATALOG = instance_catalog.default()
MODEL = Session().get_service_model("service-quotas")
P_OD = sq.ec2_quota("p5.48xlarge", sq.ON_DEMAND)


def spec_with(*queues: dict[str, Any]) -> dict[str, Any]:
    """The p4d example, normalised, with these queues (the needs read only type, count and purchase)."""
    spec = copy.deepcopy(cluster_spec.load_file(EXAMPLE_SPECS["p4d"]))
    spec["queues"] = [{"capacity_type": "on_demand", "min_count": 0, **queue} for queue in queues]
    return spec


# ---------------------------------------------------------------- the one table


@pytest.mark.parametrize(
    ("instance_type", "purchase", "code"),
    [
        ("p4d.24xlarge", sq.ON_DEMAND, "L-417A185B"),
        ("p5en.48xlarge", sq.ON_DEMAND, "L-417A185B"),
        ("p6-b200.48xlarge", sq.ON_DEMAND, "L-417A185B"),
        ("p6e-gb200.36xlarge", sq.ON_DEMAND, "L-417A185B"),
        ("g6e.48xlarge", sq.ON_DEMAND, "L-DB2E81BA"),
        ("gr6.8xlarge", sq.ON_DEMAND, "L-DB2E81BA"),
        ("vt1.3xlarge", sq.ON_DEMAND, "L-DB2E81BA"),
        ("trn2.48xlarge", sq.ON_DEMAND, "L-2C3B7624"),
        ("inf2.48xlarge", sq.ON_DEMAND, "L-1945791B"),
        ("m7i.2xlarge", sq.ON_DEMAND, "L-1216C47A"),
        ("c7gn.16xlarge", sq.ON_DEMAND, "L-1216C47A"),
        ("is4gen.8xlarge", sq.ON_DEMAND, "L-1216C47A"),
        ("hpc7g.16xlarge", sq.ON_DEMAND, "L-F7808C92"),
        ("dl1.24xlarge", sq.ON_DEMAND, "L-6E869C2A"),
        ("u7i-12tb.224xlarge", sq.ON_DEMAND, "L-43DA4232"),
        ("x2idn.32xlarge", sq.ON_DEMAND, "L-7295265B"),
        ("f1.16xlarge", sq.ON_DEMAND, "L-74FC7D96"),
        ("p4d.24xlarge", sq.SPOT, "L-7212CCBC"),
        ("p5.48xlarge", sq.SPOT, "L-C4BD4855"),
        ("g5.48xlarge", sq.SPOT, "L-3819A6DF"),
        ("trn1.32xlarge", sq.SPOT, "L-6B0D517C"),
        ("m7i.large", sq.SPOT, "L-34B43A08"),
    ],
)
def test_each_class_and_purchase_counts_against_its_quota(
    instance_type: str, purchase: str, code: str
) -> None:
    assert sq.ec2_quota(instance_type, purchase).code == code


@pytest.mark.parametrize(
    ("instance_type", "purchase"), [("p6-b200.48xlarge", sq.SPOT), ("mac2.metal", sq.ON_DEMAND)]
)
def test_a_class_without_a_row_has_no_quota_rather_than_a_guess(instance_type: str, purchase: str) -> None:
    assert sq.ec2_quota(instance_type, purchase) is None


def test_the_table_is_one_code_per_quota_in_the_api_s_form() -> None:
    pattern = MODEL.shape_for("QuotaCode").metadata["pattern"]
    codes = [row.quota.code for row in sq.EC2_QUOTAS]
    assert len(set(codes)) == len(codes)
    assert all(re.fullmatch(pattern, code) for code in codes), pattern


def test_every_catalog_type_on_demand_has_a_quota_and_its_vcpus() -> None:
    for name in CATALOG.names():
        if "." in name:
            assert sq.ec2_quota(name, sq.ON_DEMAND) is not None, name
            assert CATALOG.get(name).vcpus, name


def test_no_other_module_utils_file_holds_a_quota_code() -> None:
    """ONE table: a quota code written anywhere else in module_utils would be a second one."""
    root = REPO / "plugins" / "module_utils"
    holders = [
        p.relative_to(root).as_posix()
        for p in root.rglob("*.py")
        if re.search(r"\bL-[0-9A-F]{8}\b", p.read_text())
    ]
    assert holders == ["aws/service_quotas.py"]


# ---------------------------------------------------------------- what the queues need


def test_queues_of_one_class_add_up_and_each_key_is_named() -> None:
    spec = spec_with(
        {"name": "a", "instance_type": "p4d.24xlarge", "max_count": 4},
        {"name": "b", "instance_type": "p5.48xlarge", "max_count": 2},
        {"name": "c", "instance_type": "g6e.48xlarge", "max_count": 3, "capacity_type": "spot"},
        {"name": "d", "instance_type": "p5.48xlarge", "max_count": 8, "capacity_type": "capacity_block"},
        {"name": "e", "instance_type": "p6-b200.48xlarge", "max_count": 1, "capacity_type": "spot"},
    )
    found = cluster_quotas.needs(spec, "pcs", CATALOG)
    assert [(n.quota.code, n.key, n.amount) for n in found.needs] == [
        ("L-417A185B", "queues[0].max_count", 384),
        ("L-417A185B", "queues[1].max_count", 384),
        ("L-3819A6DF", "queues[2].max_count", 576),
    ]
    assert found.needs[0].why == "4 x p4d.24xlarge at 96 vCPUs (on-demand)"
    assert [line.split(":")[0] for line in found.unchecked] == ["queues[3]", "queues[4].instance_type"]


def test_hyperpod_queues_need_instances_of_their_type_s_cluster_quota() -> None:
    spec = spec_with({"name": "a", "instance_type": "p5.48xlarge", "max_count": 2})
    (need,) = cluster_quotas.needs(spec, "hyperpod", CATALOG).needs
    assert need.quota == sq.Quota("sagemaker", "", "ml.p5.48xlarge for cluster usage", "instances")
    assert (need.key, need.amount, need.why) == ("queues[0].max_count", 2, "2 x ml.p5.48xlarge")


def test_a_queue_that_never_grows_needs_nothing() -> None:
    spec = spec_with({"name": "a", "instance_type": "p5.48xlarge", "max_count": 0})
    assert cluster_quotas.needs(spec, "batch", CATALOG).needs == []


# ---------------------------------------------------------------- the verdict


def needs_of(*counts: int) -> list[sq.Need]:
    return [
        sq.Need(P_OD, f"queues[{i}].max_count", 192 * c, f"{c} x p5.48xlarge") for i, c in enumerate(counts)
    ]


def test_a_spec_over_a_quota_is_refused_naming_key_quota_value_and_need() -> None:
    verdict = sq.verdict(needs_of(2, 1), [sq.Reading(P_OD, 384.0, "L-417A185B", "applied")], "us-east-1")
    assert verdict.refusals == [
        "queues[0].max_count, queues[1].max_count: needs 576 vCPUs (queues[0].max_count: 2 x p5.48xlarge; "
        "queues[1].max_count: 1 x p5.48xlarge); the quota 'Running On-Demand P instances' (ec2 L-417A185B) "
        "in us-east-1 is 384 (applied). Lower max_count or ask for an increase in Service Quotas."
    ]
    assert verdict.warnings == []
    assert verdict.compared[0]["needed"] == 576 and verdict.compared[0]["value"] == 384.0


def test_a_spec_at_the_quota_passes() -> None:
    verdict = sq.verdict(needs_of(2), [sq.Reading(P_OD, 384.0, "L-417A185B", "AWS default")], "us-east-1")
    assert verdict.refusals == [] and verdict.warnings == []


def test_a_quota_that_cannot_be_read_warns_and_does_not_refuse() -> None:
    reading = sq.Reading(P_OD, problem="AccessDeniedException: not authorized")
    verdict = sq.verdict(needs_of(100), [reading], "us-east-1")
    assert verdict.refusals == []
    assert verdict.warnings == [
        "queues[0].max_count: the quota 'Running On-Demand P instances' (ec2 L-417A185B) in us-east-1 could "
        "not be read (AccessDeniedException: not authorized); the spec needs 19200 vCPUs of it "
        "(queues[0].max_count: 100 x p5.48xlarge), not checked."
    ]


def test_a_quota_found_by_name_is_named_with_the_code_it_was_found_under() -> None:
    quota = sq.sagemaker_cluster_quota("p5.48xlarge")
    need = sq.Need(quota, "queues[0].max_count", 4, "4 x ml.p5.48xlarge")
    (text,) = sq.verdict([need], [sq.Reading(quota, 2.0, "L-8762A75F", "applied")], "us-east-2").refusals
    assert "the quota 'ml.p5.48xlarge for cluster usage' (sagemaker) L-8762A75F in us-east-2 is 2" in text


def test_the_refusal_ends_with_what_was_not_done() -> None:
    assert cluster_quotas.refusal(["x."]).endswith("x. Nothing was created.")


# ---------------------------------------------------------------- the read path, against moto


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = start_moto()
    yield server
    server.stop()


def valid(operation: str, params: dict[str, Any]) -> None:
    report = ParamValidator().validate(params, MODEL.operation_model(operation).input_shape)
    assert not report.has_errors(), report.generate_report()


@pytest.mark.moto
def test_a_quota_moto_serves_is_read_with_its_value(moto: MotoServer) -> None:
    quota = sq.Quota("vpc", "L-F678F1CE", "VPCs per Region", "VPCs")
    valid("GetServiceQuota", {"ServiceCode": quota.service, "QuotaCode": quota.code})
    reading = sq.read_by_code(moto.client("service-quotas", "us-east-1"), quota)
    assert (reading.value, reading.code, reading.source, reading.problem) == (
        5.0,
        "L-F678F1CE",
        "applied",
        "",
    )


@pytest.mark.moto
def test_an_ec2_quota_moto_does_not_hold_is_a_problem_not_an_exception(moto: MotoServer) -> None:
    valid("GetAWSDefaultServiceQuota", {"ServiceCode": P_OD.service, "QuotaCode": P_OD.code})
    valid("ListServiceQuotas", {"ServiceCode": "sagemaker"})
    client = moto.client("service-quotas", "us-east-1")
    (ec2, sagemaker) = sq.read(client, [P_OD, sq.sagemaker_cluster_quota("p5.48xlarge"), P_OD])
    assert ec2.value is None and ec2.problem.startswith("NoSuchResourceException")
    assert sagemaker.value is None and sagemaker.problem
    verdict = sq.verdict(needs_of(1), [ec2], "us-east-1")
    assert verdict.refusals == [] and "could not be read (NoSuchResourceException" in verdict.warnings[0]
