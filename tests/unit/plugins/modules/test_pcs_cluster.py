"""trainstack.cluster.pcs_cluster, run in process: render-only runs, refusals, and its AWS calls on a Stubber.

moto has no PCS backend and there is no PCS endpoint here, so the calls the module makes go to a real boto3
PCS client with botocore's Stubber in front of it: the Stubber checks that each call is the next one expected
(operation and parameters), the client then checks the call's parameters against botocore's model of the PCS
API before the Stubber answers, the answer must match the model's output shape, and any call that was not
expected fails the test. So these tests show the order of the calls and that each is valid input for PCS;
they cannot show what PCS itself would answer.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.amazon.aws.plugins.module_utils.modules import AnsibleAWSModule
from ansible_collections.trainstack.cluster.plugins.module_utils.aws import wait
from ansible_collections.trainstack.cluster.plugins.modules import pcs_cluster
from botocore.exceptions import ParamValidationError
from botocore.session import Session
from botocore.stub import Stubber

from tests.support import REPO
from tests.unit.plugins.cluster_examples import FOUNDATION as SHARED_FOUNDATION

pytestmark = pytest.mark.cluster

P4D = str(REPO / "inventories" / "aws" / "clusters" / "p4d.yml")
P5 = str(REPO / "inventories" / "aws" / "clusters" / "p5.yml")
FOUNDATION = {
    **SHARED_FOUNDATION,
    "instance_profile": "arn:aws:iam::123456789012:instance-profile/aws-pcs/trainstack-node",
}
ARGS = {
    "path": P4D,
    "foundation": FOUNDATION,
    "ami_id": "ami-0d0d0d0d0d0d0d0d0",
    "launch_template": {"id": "lt-0123456789abcdef0"},
    "launch_templates": {"a100": {"id": "lt-0fedcba9876543210", "version": "2"}},
    "wait_timeout": 60,
}
NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
CLUSTER_ID = "pcs_abc123def4"
ARN = "arn:aws:pcs:us-east-1:123456789012:cluster/" + CLUSTER_ID


def cluster(status: str = "ACTIVE", size: str = "SMALL") -> dict[str, Any]:
    return {
        "cluster": {
            "name": "train-p4d",
            "id": CLUSTER_ID,
            "arn": ARN,
            "status": status,
            "createdAt": NOW,
            "modifiedAt": NOW,
            "scheduler": {"type": "SLURM", "version": "25.11"},
            "size": size,
            "networking": {"subnetIds": [FOUNDATION["subnet_private"]]},
        }
    }


def summary(name: str, ident: str, status: str = "ACTIVE") -> dict[str, Any]:
    return {
        "name": name,
        "id": ident,
        "arn": f"{ARN}/{ident}",
        "clusterId": CLUSTER_ID,
        "createdAt": NOW,
        "modifiedAt": NOW,
        "status": status,
    }


def node_group(name: str, ident: str, status: str = "CREATING") -> dict[str, Any]:
    return {
        "computeNodeGroup": {
            **summary(name, ident, status),
            "subnetIds": [FOUNDATION["subnet_private"]],
            "iamInstanceProfileArn": FOUNDATION["instance_profile"],
            "scalingConfiguration": {"minInstanceCount": 0, "maxInstanceCount": 4},
            "instanceConfigs": [{"instanceType": "p4d.24xlarge"}],
        }
    }


def queue(name: str, ident: str, group_id: str) -> dict[str, Any]:
    return {
        "queue": {
            **summary(name, ident, "CREATING"),
            "computeNodeGroupConfigurations": [{"computeNodeGroupId": group_id}],
        }
    }


def not_found(stub: Stubber, operation: str, params: dict[str, Any]) -> None:
    stub.add_client_error(
        operation, "ResourceNotFoundException", "no such cluster", 404, expected_params=params
    )


GET = {"clusterIdentifier": "train-p4d"}
BY_ID = {"clusterIdentifier": CLUSTER_ID}


@pytest.fixture
def pcs(monkeypatch: pytest.MonkeyPatch) -> Stubber:
    """A real PCS client behind a Stubber, handed to the module instead of one that would reach AWS."""
    client = Session().create_client(
        "pcs", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    stub = Stubber(client)
    asked: list[dict[str, Any]] = []

    def client_for(_module: Any, service: str, **kwargs: Any) -> Any:
        asked.append({"service": service, **kwargs})
        return client

    monkeypatch.setattr(AnsibleAWSModule, "client", client_for)
    slept: list[float] = []
    monkeypatch.setattr(wait, "SLEEP", slept.append)  # the waits' pace, without sleeping it
    stub.asked = asked  # type: ignore[attr-defined]
    stub.slept = slept  # type: ignore[attr-defined]
    with stub:
        yield stub
    stub.assert_no_pending_responses()


@pytest.fixture
def run_module(capsys: pytest.CaptureFixture[str]):
    from ansible.module_utils.testing import patch_module_args

    def run(**args: Any) -> dict[str, Any]:
        capsys.readouterr()
        with patch_module_args(args), pytest.raises(SystemExit):
            pcs_cluster.main()
        return json.loads(capsys.readouterr().out)

    return run


# ---------------------------------------------------------------- render only, refusals: no client at all


def test_render_only_returns_valid_requests_and_calls_nothing(run_module, pcs) -> None:
    res = run_module(**ARGS, render_only=True)
    assert not res.get("failed"), res
    assert res["changed"] is False
    assert res["requests"]["cluster"]["scheduler"] == {"type": "SLURM", "version": "25.11"}
    assert [g["computeNodeGroupName"] for g in res["requests"]["node_groups"]] == ["a100"]
    assert any("shared_storage.fsx_lustre" in w for w in res["warnings"])
    assert pcs.asked == []


def test_a_spec_pcs_cannot_take_fails_naming_the_key_before_any_client(run_module, pcs) -> None:
    res = run_module(**{**ARGS, "launch_templates": {}})
    assert res["failed"]
    assert "queues[0].efa: CreateComputeNodeGroup has no field for it" in res["msg"]
    assert pcs.asked == []


def test_a_bad_spec_fails_naming_the_key(run_module, pcs, tmp_path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(Path(P4D).read_text().replace("p4d.24xlarge", "p9.48xlarge"))
    res = run_module(**{**ARGS, "path": str(bad)})
    assert res["failed"]
    assert f"{bad}: queues[0].instance_type: 'p9.48xlarge' is not in the instance catalog" in res["msg"]
    assert pcs.asked == []


def test_a_request_the_model_refuses_fails_naming_the_operation(run_module, pcs) -> None:
    res = run_module(**{**ARGS, "foundation": {**FOUNDATION, "instance_profile": "trainstack-node"}})
    assert res["failed"]
    assert res["operation"] == "CreateComputeNodeGroup"
    assert res["msg"].startswith(
        "CreateComputeNodeGroup (node group a100) does not match botocore's PCS model"
    )
    assert "iamInstanceProfileArn" in res["msg"]
    assert pcs.asked == []


# ---------------------------------------------------------------- present


def test_the_stubbed_client_checks_each_call_against_the_model(pcs) -> None:
    """What makes the Stubber tests below a check of the requests: the client validates before answering."""
    client = pcs.client
    pcs.add_response("delete_queue", {})  # any parameters: only the model's check stands in the way
    with pytest.raises(ParamValidationError, match="queueIdentifier"):
        client.delete_queue(clusterIdentifier=CLUSTER_ID, queueIdentifier=7)
    pcs._queue.clear()


def expect_creation(pcs: Stubber, run_module) -> dict[str, Any]:
    requests = run_module(**ARGS, render_only=True)["requests"]
    not_found(pcs, "get_cluster", GET)
    pcs.add_response("create_cluster", cluster("CREATING"), requests["cluster"])
    pcs.add_response("get_cluster", cluster("CREATING"), GET)
    pcs.add_response("get_cluster", cluster("ACTIVE"), GET)
    pcs.add_response("list_compute_node_groups", {"computeNodeGroups": []}, BY_ID)
    group = {**requests["node_groups"][0], "clusterIdentifier": CLUSTER_ID}
    pcs.add_response("create_compute_node_group", node_group("a100", "pcs_ng0a100"), group)
    pcs.add_response(
        "list_compute_node_groups", {"computeNodeGroups": [summary("a100", "pcs_ng0a100", "CREATING")]}, BY_ID
    )
    pcs.add_response(
        "list_compute_node_groups", {"computeNodeGroups": [summary("a100", "pcs_ng0a100")]}, BY_ID
    )
    pcs.add_response("list_queues", {"queues": []}, BY_ID)
    made = {
        **requests["queues"][0],
        "clusterIdentifier": CLUSTER_ID,
        "computeNodeGroupConfigurations": [{"computeNodeGroupId": "pcs_ng0a100"}],
    }
    pcs.add_response("create_queue", queue("a100", "pcs_q0a100", "pcs_ng0a100"), made)
    pcs.add_response("list_queues", {"queues": [summary("a100", "pcs_q0a100")]}, BY_ID)
    return requests


def test_present_creates_cluster_then_node_group_then_queue(run_module, pcs) -> None:
    expect_creation(pcs, run_module)
    res = run_module(**ARGS)
    assert not res.get("failed"), res
    assert res["changed"] is True
    assert res["cluster_id"] == CLUSTER_ID
    assert res["created"] == ["cluster train-p4d", "node group a100", "queue a100"]
    assert res["node_group_ids"] == {"a100": "pcs_ng0a100"}
    assert [line.split(" ", 1)[1] for line in res["progress"]] == [
        "cluster train-p4d CREATING",
        "cluster train-p4d ACTIVE",
        "node group a100 CREATING",
        "node group a100 ACTIVE",
        "queue a100 ACTIVE",
    ]
    assert pcs.slept == [15, 15]  # the module's own pace: no poll_interval given
    ((asked, config),) = [({k: v for k, v in a.items() if k != "config"}, a["config"]) for a in pcs.asked]
    assert asked == {"service": "pcs", "region": "us-east-1"}
    assert config.retries["mode"] == "standard"  # botocore retries throttling


def test_an_existing_cluster_with_the_same_spec_is_left_alone(run_module, pcs) -> None:
    pcs.add_response("get_cluster", cluster("ACTIVE"), GET)
    pcs.add_response(
        "list_compute_node_groups", {"computeNodeGroups": [summary("a100", "pcs_ng0a100")]}, BY_ID
    )
    pcs.add_response(
        "list_compute_node_groups", {"computeNodeGroups": [summary("a100", "pcs_ng0a100")]}, BY_ID
    )
    pcs.add_response("list_queues", {"queues": [summary("a100", "pcs_q0a100")]}, BY_ID)
    pcs.add_response("list_queues", {"queues": [summary("a100", "pcs_q0a100")]}, BY_ID)
    res = run_module(**ARGS)
    assert not res.get("failed"), res
    assert (res["changed"], res["created"]) == (False, [])
    assert res["node_group_ids"] == {"a100": "pcs_ng0a100"}
    assert "warnings" not in res or not any("left as it is" in w for w in res["warnings"])


def test_an_existing_cluster_of_another_size_is_reported_not_changed(run_module, pcs) -> None:
    pcs.add_response("get_cluster", cluster("ACTIVE", size="LARGE"), GET)
    pcs.add_response(
        "list_compute_node_groups", {"computeNodeGroups": [summary("a100", "pcs_ng0a100")]}, BY_ID
    )
    pcs.add_response("list_queues", {"queues": [summary("a100", "pcs_q0a100")]}, BY_ID)
    res = run_module(**ARGS, _ansible_check_mode=True)
    assert (res["changed"], res["created"]) == (False, [])
    assert any("size is LARGE, not SMALL; left as it is" in w for w in res["warnings"])


def test_check_mode_on_a_missing_cluster_only_looks(run_module, pcs) -> None:
    not_found(pcs, "get_cluster", GET)
    res = run_module(**ARGS, _ansible_check_mode=True)
    assert res["changed"] is True
    assert res["created"] == ["cluster train-p4d", "node group a100", "queue a100"]


def test_a_node_group_that_fails_to_create_fails_the_module(run_module, pcs) -> None:
    requests = run_module(**ARGS, render_only=True)["requests"]
    pcs.add_response("get_cluster", cluster("ACTIVE"), GET)
    pcs.add_response("list_compute_node_groups", {"computeNodeGroups": []}, BY_ID)
    group = {**requests["node_groups"][0], "clusterIdentifier": CLUSTER_ID}
    pcs.add_response("create_compute_node_group", node_group("a100", "pcs_ng0a100"), group)
    failed = summary("a100", "pcs_ng0a100", "CREATE_FAILED")
    pcs.add_response("list_compute_node_groups", {"computeNodeGroups": [failed]}, BY_ID)
    res = run_module(**ARGS)
    assert res["failed"]
    assert res["msg"] == "PCS node group a100 is CREATE_FAILED"


def test_a_created_node_group_that_is_not_listed_fails_the_module(run_module, pcs) -> None:
    requests = run_module(**ARGS, render_only=True)["requests"]
    pcs.add_response("get_cluster", cluster("ACTIVE"), GET)
    pcs.add_response("list_compute_node_groups", {"computeNodeGroups": []}, BY_ID)
    group = {**requests["node_groups"][0], "clusterIdentifier": CLUSTER_ID}
    pcs.add_response("create_compute_node_group", node_group("a100", "pcs_ng0a100"), group)
    pcs.add_response("list_compute_node_groups", {"computeNodeGroups": []}, BY_ID)
    res = run_module(**ARGS)
    assert res["failed"]
    assert res["msg"] == f"PCS node group a100: created, but not listed by the cluster {CLUSTER_ID}"


# ---------------------------------------------------------------- absent


def test_absent_deletes_queues_then_node_groups_then_the_cluster(run_module, pcs) -> None:
    pcs.add_response("get_cluster", cluster("ACTIVE"), GET)
    both_queues = [summary("a100", "pcs_q0a100"), summary("debug", "pcs_q0debug")]
    both_groups = [summary("a100", "pcs_ng0a100"), summary("login", "pcs_ng0login")]
    pcs.add_response("list_queues", {"queues": both_queues}, BY_ID)
    pcs.add_response("list_compute_node_groups", {"computeNodeGroups": both_groups}, BY_ID)
    pcs.add_response("delete_queue", {}, {**BY_ID, "queueIdentifier": "pcs_q0a100"})
    pcs.add_response("delete_queue", {}, {**BY_ID, "queueIdentifier": "pcs_q0debug"})
    pcs.add_response("list_queues", {"queues": [summary("debug", "pcs_q0debug", "DELETING")]}, BY_ID)
    pcs.add_response("list_queues", {"queues": []}, BY_ID)
    for ident in ("pcs_ng0a100", "pcs_ng0login"):
        params = {**BY_ID, "computeNodeGroupIdentifier": ident}
        pcs.add_response("delete_compute_node_group", {}, params)
    pcs.add_response("list_compute_node_groups", {"computeNodeGroups": []}, BY_ID)
    pcs.add_response("delete_cluster", {}, {**BY_ID})
    pcs.add_response("get_cluster", cluster("DELETING"), GET)
    not_found(pcs, "get_cluster", GET)
    res = run_module(path=P4D, state="absent", wait_timeout=60)
    assert not res.get("failed"), res
    assert res["changed"] is True
    assert res["deleted"] == [
        "queue a100",
        "queue debug",
        "node group a100",
        "node group login",
        "cluster train-p4d",
    ]


def test_absent_on_a_missing_cluster_changes_nothing(run_module, pcs) -> None:
    not_found(pcs, "get_cluster", GET)
    res = run_module(path=P4D, state="absent")
    assert (res["changed"], res["deleted"]) == (False, [])


def test_absent_in_check_mode_deletes_nothing(run_module, pcs) -> None:
    pcs.add_response("get_cluster", cluster("ACTIVE"), GET)
    pcs.add_response("list_queues", {"queues": [summary("a100", "pcs_q0a100")]}, BY_ID)
    pcs.add_response(
        "list_compute_node_groups", {"computeNodeGroups": [summary("a100", "pcs_ng0a100")]}, BY_ID
    )
    res = run_module(path=P4D, state="absent", _ansible_check_mode=True)
    assert res["changed"] is True
    assert res["deleted"] == ["queue a100", "node group a100", "cluster train-p4d"]


def test_a_queue_that_fails_to_delete_stops_the_teardown(run_module, pcs) -> None:
    pcs.add_response("get_cluster", cluster("ACTIVE"), GET)
    pcs.add_response("list_queues", {"queues": [summary("a100", "pcs_q0a100")]}, BY_ID)
    pcs.add_response(
        "list_compute_node_groups", {"computeNodeGroups": [summary("a100", "pcs_ng0a100")]}, BY_ID
    )
    pcs.add_response("delete_queue", {}, {**BY_ID, "queueIdentifier": "pcs_q0a100"})
    pcs.add_response("list_queues", {"queues": [summary("a100", "pcs_q0a100", "DELETE_FAILED")]}, BY_ID)
    res = run_module(path=P4D, state="absent")
    assert res["failed"]
    assert res["msg"] == "PCS queue a100 is DELETE_FAILED"


# ---------------------------------------------------------------- the documentation's task


def test_the_render_only_task_of_the_docs_runs_as_written(run_module, pcs, monkeypatch) -> None:
    text = (REPO / "docs" / "aws-pcs.md").read_text()
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    (task,) = yaml.safe_load(block)
    monkeypatch.chdir(REPO)
    res = run_module(**task["trainstack.cluster.pcs_cluster"])
    assert not res.get("failed"), res
    assert res["requests"]["cluster"]["clusterName"] == "train-p4d"
    assert pcs.asked == []


# ---------------------------------------------------------------- the waits every cluster module shares


@pytest.mark.parametrize("key", ["wait_timeout", "poll_interval"])
def test_a_wait_of_no_time_is_refused_before_any_client(run_module, pcs, key: str) -> None:
    res = run_module(**{**ARGS, key: 0})
    assert res["failed"]
    assert res["msg"] == f"{key}: must be more than 0 seconds (got 0)"
    assert pcs.asked == []


def test_a_wait_that_runs_out_says_what_it_waited_for_and_the_last_status(
    run_module, pcs, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [0.0]
    monkeypatch.setattr(wait, "CLOCK", lambda: now[0])
    monkeypatch.setattr(wait, "SLEEP", lambda seconds: now.__setitem__(0, now[0] + seconds))
    for _look in range(5):  # the first look, then one at 0, 20, 40 and 60 s
        pcs.add_response("get_cluster", cluster("CREATING"), GET)
    res = run_module(**{**ARGS, "wait_timeout": 60, "poll_interval": 20})
    assert res["failed"]
    assert res["msg"] == (
        "PCS cluster train-p4d: still CREATING after 60 s (wait_timeout), not ACTIVE. PCS goes on; run the "
        "same task again to wait once more, or watch it with aws pcs get-cluster"
    )
    assert (res["status"], res["progress"]) == ("CREATING", ["0s cluster train-p4d CREATING"])


def test_without_wait_the_cluster_deletion_is_not_waited_for(run_module, pcs) -> None:
    """The queues and node groups must be gone before what they use is deleted, so those are waited for."""
    pcs.add_response("get_cluster", cluster("ACTIVE"), GET)
    pcs.add_response("list_queues", {"queues": [summary("a100", "pcs_q0a100")]}, BY_ID)
    pcs.add_response(
        "list_compute_node_groups", {"computeNodeGroups": [summary("a100", "pcs_ng0a100")]}, BY_ID
    )
    pcs.add_response("delete_queue", {}, {**BY_ID, "queueIdentifier": "pcs_q0a100"})
    pcs.add_response("list_queues", {"queues": []}, BY_ID)
    params = {**BY_ID, "computeNodeGroupIdentifier": "pcs_ng0a100"}
    pcs.add_response("delete_compute_node_group", {}, params)
    pcs.add_response("list_compute_node_groups", {"computeNodeGroups": []}, BY_ID)
    pcs.add_response("delete_cluster", {}, {**BY_ID})
    res = run_module(path=P4D, state="absent", wait=False)
    assert not res.get("failed"), res
    assert res["deleted"] == ["queue a100", "node group a100", "cluster train-p4d"]
