"""trainstack.cluster.hyperpod_cluster, run in process: against a real moto server, and on a Stubber.

moto (5.2.5) implements SageMaker's CreateCluster, DescribeCluster, DeleteCluster and ListClusterNodes, so
creation, the wait for InService, a second run that changes nothing, and deletion run against one moto
server (a real HTTP endpoint) shared by this module's tests. moto has no UpdateCluster, and its clusters are
InService at once: the scale path, a wait that runs out and a failed cluster run on a real boto3 SageMaker
client with botocore's Stubber in front of it. The Stubber checks that each call is the next one expected
(operation and parameters), the client checks the parameters against botocore's SageMaker model before the
Stubber answers, and the answers must match the model's output shapes; so those tests show the calls and
that each is valid input for SageMaker, not what SageMaker would answer.
"""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Iterator
from typing import Any

import pytest
from ansible_collections.amazon.aws.plugins.module_utils.modules import AnsibleAWSModule
from ansible_collections.trainstack.cluster.plugins.modules import hyperpod_cluster
from botocore.session import Session
from botocore.stub import Stubber

from tests.support import REPO, MotoServer, start_moto

pytestmark = pytest.mark.cluster

SPEC = str(REPO / "inventories" / "aws" / "hyperpod" / "train-hp.yml")
REGION = "us-east-1"
FOUNDATION = {
    "subnet_private": "subnet-0b0b0b0b0b0b0b0b0",
    "security_group": "sg-0c0c0c0c0c0c0c0c0",
    "execution_role": "arn:aws:iam::123456789012:role/trainstack-train-hp-hyperpod",
    "lifecycle_s3_uri": "s3://sagemaker-trainstack-train-hp/hyperpod/train-hp",
    "fsx_dns_name": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
    "fsx_mount_name": "abcdefgh",
}
ARGS = {"path": SPEC, "foundation": FOUNDATION, "poll_interval": 1, "wait_timeout": 60}
ARN = "arn:aws:sagemaker:us-east-1:123456789012:cluster/abcdef012345"
NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
KEY_PARAMETER = "/trainstack/hyperpod/train-hp/munge-key"


@pytest.fixture
def run_module(capsys: pytest.CaptureFixture[str]):
    from ansible.module_utils.testing import patch_module_args

    def run(**args: Any) -> dict[str, Any]:
        capsys.readouterr()
        with patch_module_args(args), pytest.raises(SystemExit):
            hyperpod_cluster.main()
        return json.loads(capsys.readouterr().out)

    return run


@pytest.fixture
def no_client(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records every client the module asks for; refusals and render-only runs must ask for none."""
    asked: list[str] = []

    def client_for(_module: Any, service: str, **_kwargs: Any) -> Any:
        asked.append(service)
        raise AssertionError(f"the module asked for a {service} client")

    monkeypatch.setattr(AnsibleAWSModule, "client", client_for)
    return asked


# ---------------------------------------------------------------- before any client


def test_render_only_returns_the_request_and_the_parameters_file(run_module, no_client) -> None:
    res = run_module(**ARGS, render_only=True)
    assert not res.get("failed"), res
    assert res["changed"] is False
    assert [g["InstanceGroupName"] for g in res["request"]["InstanceGroups"]] == [
        "controller",
        "login",
        "a100",
    ]
    assert res["provisioning_parameters"]["worker_groups"] == [
        {"instance_group_name": "a100", "partition_name": "a100"}
    ]
    assert no_client == []


def test_a_missing_execution_role_fails_naming_the_key_before_any_client(run_module, no_client) -> None:
    foundation = {k: v for k, v in FOUNDATION.items() if k != "execution_role"}
    res = run_module(**{**ARGS, "foundation": foundation})
    assert res["failed"]
    assert "foundation.execution_role: is required" in res["msg"]
    assert no_client == []


@pytest.mark.parametrize("key", ["wait_timeout", "poll_interval"])
def test_a_wait_of_zero_seconds_is_refused(run_module, no_client, key: str) -> None:
    res = run_module(**{**ARGS, key: 0})
    assert res["failed"]
    assert res["msg"] == f"{key}: must be more than 0 seconds (got 0)"
    assert no_client == []


# ---------------------------------------------------------------- against moto


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = start_moto()
    yield server
    server.stop()


def moto_args(moto: MotoServer, **changes: Any) -> dict[str, Any]:
    return {
        **ARGS,
        "endpoint_url": moto.url,
        "access_key": "testing",
        "secret_key": "testing",
        **changes,
    }


@pytest.mark.moto
def test_create_in_service_again_unchanged_then_delete_against_moto(run_module, moto) -> None:
    sagemaker = moto.client("sagemaker", REGION)
    assert run_module(**moto_args(moto, _ansible_check_mode=True))["action"] == "create"
    assert sagemaker.list_clusters()["ClusterSummaries"] == []  # check mode created nothing

    made = run_module(**moto_args(moto))
    assert not made.get("failed"), made
    assert (made["changed"], made["action"], made["status"]) == (True, "create", "InService")
    assert made["progress"] and made["progress"][-1].endswith("InService")
    described = sagemaker.describe_cluster(ClusterName="train-hp")
    assert described["ClusterArn"] == made["cluster_arn"]
    counts = {g["InstanceGroupName"]: g["TargetCount"] for g in described["InstanceGroups"]}
    assert counts == {"controller": 1, "login": 1, "a100": 2}
    nodes = sagemaker.list_cluster_nodes(ClusterName="train-hp")["ClusterNodeSummaries"]
    assert sorted(n["InstanceGroupName"] for n in nodes) == ["a100", "a100", "controller", "login"]

    again = run_module(**moto_args(moto))
    assert not again.get("failed"), again
    assert (again["changed"], again["action"], again["scaled"]) == (False, "none", {})
    assert again["munge_key"] == {"parameter": KEY_PARAMETER, "action": "none"}

    checked = run_module(**moto_args(moto, state="absent", _ansible_check_mode=True))
    assert (checked["changed"], checked["action"]) == (True, "delete")
    assert sagemaker.list_clusters()["ClusterSummaries"] != []

    gone = run_module(**moto_args(moto, state="absent"))
    assert not gone.get("failed"), gone
    assert (gone["changed"], gone["action"]) == (True, "delete")
    assert sagemaker.list_clusters()["ClusterSummaries"] == []
    assert run_module(**moto_args(moto, state="absent"))["changed"] is False


@pytest.mark.moto
def test_the_munge_key_is_a_secure_string_made_with_the_cluster_kept_and_gone_with_it(
    run_module, moto
) -> None:
    """Created before the cluster (its first nodes read it at boot), a SecureString of 1024 random bytes; a
    second run keeps it (the running nodes hold it); teardown deletes it; no result carries its value."""
    ssm = moto.client("ssm", REGION)
    checked = run_module(**moto_args(moto, _ansible_check_mode=True))
    assert checked["munge_key"] == {"parameter": KEY_PARAMETER, "action": "create"}
    assert ssm.describe_parameters()["Parameters"] == []  # check mode wrote nothing

    made = run_module(**moto_args(moto))
    assert not made.get("failed"), made
    assert made["munge_key"] == {"parameter": KEY_PARAMETER, "action": "create"}
    stored = ssm.get_parameter(Name=KEY_PARAMETER, WithDecryption=True)["Parameter"]
    assert stored["Type"] == "SecureString"
    assert len(base64.b64decode(stored["Value"], validate=True)) == 1024
    tags = ssm.list_tags_for_resource(ResourceType="Parameter", ResourceId=KEY_PARAMETER)["TagList"]
    assert {"Key": "trainstack:cluster", "Value": "train-hp"} in tags

    again = run_module(**moto_args(moto))
    assert again["munge_key"]["action"] == "none"
    kept = ssm.get_parameter(Name=KEY_PARAMETER, WithDecryption=True)["Parameter"]
    assert (kept["Value"], kept["Version"]) == (stored["Value"], stored["Version"])

    gone = run_module(**moto_args(moto, state="absent"))
    assert gone["munge_key"] == {"parameter": KEY_PARAMETER, "action": "delete"}
    assert ssm.describe_parameters()["Parameters"] == []
    assert run_module(**moto_args(moto, state="absent"))["munge_key"]["action"] == "none"
    for result in (checked, made, again, gone):
        assert stored["Value"] not in json.dumps(result)


# ---------------------------------------------------------------- on a Stubber: scale, timeout, failure


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stubber]:
    """A stubbed SageMaker client, and an SSM one that finds the cluster's munge key already there (each
    test runs the module once with state=present: one DescribeParameters, which returns no value)."""
    session = Session()
    clients = {
        service: session.create_client(
            service, region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
        )
        for service in ("sagemaker", "ssm")
    }
    stubber = Stubber(clients["sagemaker"])
    ssm = Stubber(clients["ssm"])
    ssm.add_response(
        "describe_parameters",
        {"Parameters": [{"Name": KEY_PARAMETER, "Type": "SecureString"}]},
        {"ParameterFilters": [{"Key": "Name", "Option": "Equals", "Values": [KEY_PARAMETER]}]},
    )
    monkeypatch.setattr(AnsibleAWSModule, "client", lambda _module, service, **_k: clients[service])
    with stubber, ssm:
        yield stubber
    stubber.assert_no_pending_responses()


def described(status: str = "InService", a100: int = 2, **extra: Any) -> dict[str, Any]:
    groups = [
        ("controller", "ml.m5.2xlarge", 1),
        ("login", "ml.m5.xlarge", 1),
        ("a100", "ml.p4d.24xlarge", a100),
    ]
    return {
        "ClusterArn": ARN,
        "ClusterName": "train-hp",
        "ClusterStatus": status,
        "CreationTime": NOW,
        "InstanceGroups": [
            {"InstanceGroupName": name, "InstanceType": itype, "CurrentCount": count, "TargetCount": count}
            for name, itype, count in groups
        ],
        **extra,
    }


NAME = {"ClusterName": "train-hp"}


def test_a_new_count_is_sent_as_update_cluster_with_the_rendered_groups(run_module, stub) -> None:
    """The scale path on the Stubber (moto has no UpdateCluster): the client validates the UpdateCluster
    call against botocore's SageMaker model before the Stubber answers it."""
    request = run_module(**ARGS, render_only=True)["request"]
    assert request["InstanceGroups"][2]["InstanceCount"] == 2
    stub.add_response("describe_cluster", described(a100=1), NAME)
    update = {"ClusterName": "train-hp", "InstanceGroups": request["InstanceGroups"]}
    stub.add_response("update_cluster", {"ClusterArn": ARN}, update)
    stub.add_response("describe_cluster", described("Updating"), NAME)
    stub.add_response("describe_cluster", described("InService"), NAME)
    res = run_module(**ARGS)
    assert not res.get("failed"), res
    assert (res["changed"], res["action"], res["scaled"]) == (True, "update", {"a100": "1 -> 2"})
    assert res["status"] == "InService"
    assert [line.split(" ", 1)[1] for line in res["progress"]] == ["Updating", "InService"]


def test_check_mode_reports_the_scale_and_sends_nothing(run_module, stub) -> None:
    stub.add_response("describe_cluster", described(a100=4), NAME)
    res = run_module(**ARGS, _ansible_check_mode=True)
    assert (res["changed"], res["action"], res["scaled"]) == (True, "update", {"a100": "4 -> 2"})


def test_a_wait_that_runs_out_says_the_status_and_how_to_wait_again(run_module, stub) -> None:
    for _attempt in range(3):
        stub.add_response("describe_cluster", described("Creating"), NAME)
    res = run_module(**{**ARGS, "wait_timeout": 1, "poll_interval": 1})
    assert res["failed"]
    assert res["status"] == "Creating"
    assert res["msg"].startswith(
        "HyperPod cluster train-hp: still Creating after 1 s (wait_timeout), not InService."
    )
    assert "run the same task again (state=present)" in res["msg"]
    assert "aws sagemaker describe-cluster --cluster-name train-hp" in res["msg"]


def test_a_failed_cluster_fails_the_module_with_its_message(run_module, stub) -> None:
    stub.add_response("describe_cluster", described("Creating"), NAME)
    stub.add_response(
        "describe_cluster", described("Failed", FailureMessage="no capacity for ml.p4d.24xlarge"), NAME
    )
    res = run_module(**ARGS)
    assert res["failed"]
    assert res["msg"] == "HyperPod cluster train-hp is Failed: no capacity for ml.p4d.24xlarge"


def test_the_stubbed_client_refuses_an_update_the_model_refuses(stub) -> None:
    """What makes the Stubber test of the scale path a check of the request: the client validates first."""
    from botocore.exceptions import ParamValidationError

    stub.add_response("update_cluster", {"ClusterArn": ARN})
    with pytest.raises(ParamValidationError, match="InstanceCount"):
        stub.client.update_cluster(ClusterName="train-hp", InstanceGroups=[{"InstanceGroupName": "a100"}])
    stub._queue.clear()
