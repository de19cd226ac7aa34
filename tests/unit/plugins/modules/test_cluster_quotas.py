"""trainstack.cluster.cluster_quotas, run in process: against a real moto server (whose Service Quotas holds
no EC2 quota: the read path's warnings), against an endpoint nothing listens on, and on a botocore Stubber
that answers an applied quota below what the spec needs. The Stubber validates each request against the
Service Quotas model, answers only the reads queued for it and fails on any other call, so the refusal is
shown to come from reads alone. The cluster playbooks are then read to show that this check runs before
their first create, so a spec over a quota creates nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from ansible_collections.amazon.aws.plugins.module_utils.modules import AnsibleAWSModule
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import cluster_spec
from ansible_collections.trainstack.cluster.plugins.modules import cluster_quotas
from botocore.session import Session
from botocore.stub import Stubber

from tests.support import REPO, MotoServer, start_moto
from tests.unit.plugins.cluster_examples import EXAMPLE_SPECS

pytestmark = [pytest.mark.cluster]

REGION = "us-east-1"
NOWHERE = "http://127.0.0.1:9"  # the discard port: nothing answers
SPEC = cluster_spec.load_file(EXAMPLE_SPECS["p4d"])  # one queue, a100: 4 x p4d.24xlarge (96 vCPUs)
KEYS = {"access_key": "testing", "secret_key": "testing"}


@pytest.fixture
def run_module(capsys: pytest.CaptureFixture[str]):
    from ansible.module_utils.testing import patch_module_args

    def run(**args: Any) -> dict[str, Any]:
        capsys.readouterr()
        with patch_module_args({**KEYS, **args}), pytest.raises(SystemExit):
            cluster_quotas.main()
        return json.loads(capsys.readouterr().out)

    return run


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = start_moto()
    yield server
    server.stop()


@pytest.mark.moto
def test_against_moto_a_quota_it_does_not_hold_is_a_warning_and_the_run_goes_on(run_module, moto) -> None:
    res = run_module(spec=SPEC, backend="pcs", endpoint_url=moto.url, _ansible_check_mode=True)
    assert not res.get("failed") and res["changed"] is False, res
    (compared,) = res["quotas"]
    assert compared["code"] == "L-417A185B" and compared["value"] is None and compared["needed"] == 384
    assert compared["problem"].startswith("NoSuchResourceException")
    (warning,) = res["warnings"]
    assert warning.startswith(
        "queues[0].max_count: the quota 'Running On-Demand P instances' (ec2 L-417A185B) in us-east-1 could "
        "not be read (NoSuchResourceException"
    )


@pytest.mark.moto
def test_unreachable_service_quotas_is_a_warning(run_module) -> None:
    res = run_module(spec=SPEC, backend="hyperpod", endpoint_url=NOWHERE)
    assert not res.get("failed"), res
    assert "'ml.p4d.24xlarge for cluster usage' (sagemaker)" in res["warnings"][0]
    assert "could not be read (EndpointConnectionError" in res["warnings"][0]


def test_a_spec_of_capacity_blocks_reads_nothing(run_module) -> None:
    block = {"capacity_type": "capacity_block", "capacity_reservation_id": "cr-0123456789abcdef0"}
    spec = {**SPEC, "queues": [{**SPEC["queues"][0], **block, "min_count": 4}]}
    res = run_module(spec=spec, backend="pcs", endpoint_url=NOWHERE)
    assert not res.get("failed") and res["quotas"] == [] and "warnings" not in res, res
    assert res["unchecked"] == [
        "queues[0]: a capacity_block queue runs on its reservation, which bounds it; no vCPU quota is checked"
    ]


def test_a_bad_spec_is_refused_before_any_read(run_module) -> None:
    res = run_module(spec={**SPEC, "region": "us-eats-1"}, backend="pcs", endpoint_url=NOWHERE)
    assert res["failed"] and "region: us-eats-1 is not an AWS region" in res["msg"], res


# ---------------------------------------------------------------- on a Stubber: the refusal


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stubber]:
    made = Session().create_client(
        "service-quotas", region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    stubber = Stubber(made)
    monkeypatch.setattr(
        AnsibleAWSModule, "client", lambda _module, service, **_k: {"service-quotas": made}[service]
    )
    with stubber:
        yield stubber
    stubber.assert_no_pending_responses()


def applied(code: str, name: str, value: float) -> dict[str, Any]:
    return {
        "Quota": {"ServiceCode": "ec2", "QuotaCode": code, "QuotaName": name, "Value": value, "Unit": "None"}
    }


def test_a_spec_over_the_applied_quota_is_refused_naming_the_key(run_module, stub: Stubber) -> None:
    stub.add_response(
        "get_service_quota",
        applied("L-417A185B", "Running On-Demand P instances", 256.0),
        {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"},
    )
    res = run_module(spec=SPEC, backend="parallelcluster")
    assert res["failed"] is True
    assert res["msg"] == (
        "The cluster spec asks for more than the account's quotas allow: queues[0].max_count: needs 384 "
        "vCPUs (queues[0].max_count: 4 x p4d.24xlarge at 96 vCPUs (on-demand)); the quota 'Running "
        "On-Demand P instances' (ec2 L-417A185B) in us-east-1 is 256 (applied). Lower max_count or ask for "
        "an increase in Service Quotas. Nothing was created."
    )
    assert res["quotas"][0]["value"] == 256.0 and res["quotas"][0]["needed"] == 384


def test_without_an_applied_value_the_aws_default_is_the_quota(run_module, stub: Stubber) -> None:
    stub.add_client_error(
        "get_service_quota",
        "NoSuchResourceException",
        expected_params={"ServiceCode": "ec2", "QuotaCode": "L-417A185B"},
    )
    stub.add_response(
        "get_aws_default_service_quota",
        applied("L-417A185B", "Running On-Demand P instances", 384.0),
        {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"},
    )
    res = run_module(spec=SPEC, backend="batch", nothing_done="Nothing was sent.")
    assert not res.get("failed") and "warnings" not in res, res
    assert res["quotas"][0]["source"] == "AWS default"


def test_access_denied_is_a_warning_not_a_refusal(run_module, stub: Stubber) -> None:
    stub.add_client_error(
        "get_service_quota", "AccessDeniedException", "not authorized to perform GetServiceQuota"
    )
    res = run_module(spec=SPEC, backend="eks")
    assert not res.get("failed"), res
    assert (
        "could not be read (AccessDeniedException: not authorized to perform GetServiceQuota)"
        in res["warnings"][0]
    )


def test_hyperpod_reads_its_type_s_quota_by_name(run_module, stub: Stubber) -> None:
    listed = {
        "ServiceCode": "sagemaker",
        "QuotaCode": "L-47E0BC8F",
        "QuotaName": "ml.p4d.24xlarge for cluster usage",
    }
    stub.add_response(
        "list_service_quotas", {"Quotas": [{**listed, "Value": 2.0}]}, {"ServiceCode": "sagemaker"}
    )
    res = run_module(spec=SPEC, backend="hyperpod")
    assert res["failed"] is True
    assert (
        "the quota 'ml.p4d.24xlarge for cluster usage' (sagemaker) L-47E0BC8F in us-east-1 is 2" in res["msg"]
    )
    assert res["msg"].startswith(
        "The cluster spec asks for more than the account's quotas allow: queues[0].max_count"
    )


# ---------------------------------------------------------------- before the first create, in every playbook

READ_ONLY = {"ansible.builtin.assert", "trainstack.cluster.cluster_spec", "ansible.builtin.set_fact"}
PLAYBOOKS = ["batch_cluster", "eks_cluster", "hyperpod_cluster", "pcluster_cluster", "pcs_cluster"]


def module_of(task: dict[str, Any]) -> str:
    return next(key for key in task if key.startswith(("ansible.", "trainstack.", "amazon.", "community.")))


@pytest.mark.parametrize("name", PLAYBOOKS)
def test_the_cluster_playbooks_check_quotas_before_anything_else_calls_aws(name: str) -> None:
    tasks = yaml.safe_load((REPO / "playbooks" / f"{name}.yml").read_text())[0]["tasks"]
    index = next(i for i, t in enumerate(tasks) if "trainstack.cluster.cluster_quotas" in t)
    assert {module_of(t) for t in tasks[:index]} <= READ_ONLY
    assert tasks[index]["trainstack.cluster.cluster_quotas"]["spec"] == f"{{{{ __{name}_spec.spec }}}}"


def test_the_foundation_checks_quotas_before_its_role_creates_anything() -> None:
    (play,) = yaml.safe_load((REPO / "playbooks" / "cluster_foundation.yml").read_text())
    assert [module_of(t) for t in play["pre_tasks"]][-1] == "trainstack.cluster.cluster_quotas"
    assert {module_of(t) for t in play["pre_tasks"][:-1]} <= READ_ONLY
    assert (
        play["pre_tasks"][-1]["trainstack.cluster.cluster_quotas"]["backend"]
        == "{{ aws_foundation_orchestrator }}"
    )
