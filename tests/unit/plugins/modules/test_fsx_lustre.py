"""trainstack.cluster.fsx_lustre: its FSx requests against botocore's model of the API.

moto implements CreateFileSystem but accepts any arguments, and has no data repository associations at all, so
the requests the module builds are validated by botocore's own parameter validator on the operation's input
shape, and the association step runs on a botocore Stubber (which validates each call the same way and
answers with responses checked against the output shape). File system create and delete against a moto
server are in tests/integration/aws.
"""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.trainstack.cluster.plugins.modules import fsx_lustre
from botocore.session import Session
from botocore.stub import Stubber
from botocore.validate import ParamValidator

pytestmark = pytest.mark.aws
FSX = Session().get_service_model("fsx")
LINK = {
    "file_system_path": "/data",
    "data_repository_path": "s3://trainstack-llm-a-us-east-1/data/",
    "import_events": ["NEW", "CHANGED", "DELETED"],
    "export_events": [],
}


def params(**overrides: Any) -> dict[str, Any]:
    """The module's parameters with its defaults, as AnsibleAWSModule hands them over."""
    base = {
        "state": "present",
        "cluster": "llm-a",
        "name": "llm-a-fsx",
        "deployment_type": "PERSISTENT_2",
        "storage_capacity": 1200,
        "per_unit_storage_throughput": 250,
        "file_system_type_version": "2.15",
        "subnet_id": "subnet-0123456789abcdef0",
        "security_group_ids": ["sg-0123456789abcdef0"],
        "tags": {"team": "ml"},
        "data_repository": None,
        "wait": True,
        "wait_timeout": 60,
    }
    return {**base, **overrides}


def api_errors(operation: str, request: dict[str, Any]) -> str:
    report = ParamValidator().validate(request, FSX.operation_model(operation).input_shape)
    return report.generate_report() if report.has_errors() else ""


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({}, id="persistent_2"),
        pytest.param(
            {"deployment_type": "PERSISTENT_1", "per_unit_storage_throughput": 200}, id="persistent_1"
        ),
        pytest.param({"deployment_type": "SCRATCH_2", "per_unit_storage_throughput": None}, id="scratch_2"),
    ],
)
def test_create_request_is_a_valid_create_file_system(overrides: dict[str, Any]) -> None:
    request = fsx_lustre.create_request(params(**overrides))
    assert api_errors("CreateFileSystem", request) == ""
    tags = {t["Key"]: t["Value"] for t in request["Tags"]}
    assert tags == {"trainstack:cluster": "llm-a", "Name": "llm-a-fsx", "team": "ml"}
    assert request["SubnetIds"] == ["subnet-0123456789abcdef0"]
    assert request["SecurityGroupIds"] == ["sg-0123456789abcdef0"]
    lustre = request["LustreConfiguration"]
    assert lustre["DeploymentType"] == params(**overrides)["deployment_type"]
    assert ("PerUnitStorageThroughput" in lustre) == (
        overrides.get("per_unit_storage_throughput", 250) is not None
    )


def test_tags_cannot_take_over_the_cluster_tag() -> None:
    request = fsx_lustre.create_request(params(tags={"trainstack:cluster": "other", "Name": "x"}))
    assert {t["Key"]: t["Value"] for t in request["Tags"]} == {
        "trainstack:cluster": "llm-a",
        "Name": "llm-a-fsx",
    }


def test_client_token_is_stable_and_valid() -> None:
    """A retried create carries the same token (FSx then makes one file system), within FSx's pattern."""
    token = fsx_lustre.client_token("llm-a", "llm-a-fsx")
    assert (
        token
        == fsx_lustre.client_token("llm-a", "llm-a-fsx")
        != fsx_lustre.client_token("llm-b", "llm-a-fsx")
    )
    assert (
        api_errors("CreateFileSystem", {**fsx_lustre.create_request(params()), "ClientRequestToken": token})
        == ""
    )


def test_association_request_is_a_valid_create_data_repository_association() -> None:
    request = fsx_lustre.association_request("fs-0123456789abcdef0", params(data_repository=LINK))
    assert api_errors("CreateDataRepositoryAssociation", request) == ""
    assert request["S3"] == {"AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]}}
    assert (request["FileSystemPath"], request["DataRepositoryPath"]) == (
        "/data",
        LINK["data_repository_path"],
    )
    exported = fsx_lustre.association_request(
        "fs-0123456789abcdef0", params(data_repository={**LINK, "export_events": ["NEW"]})
    )
    assert api_errors("CreateDataRepositoryAssociation", exported) == ""
    assert exported["S3"]["AutoExportPolicy"] == {"Events": ["NEW"]}


def test_the_validator_refuses_a_broken_request() -> None:
    """The check itself: what FSx's model refuses is reported."""
    request = fsx_lustre.association_request("fs-0123456789abcdef0", params(data_repository=LINK))
    del request["DataRepositoryPath"]
    request["FileSystemPath"] = 7
    report = api_errors("CreateDataRepositoryAssociation", request)
    assert "FileSystemPath" in report


class FakeModule:
    """What ensure_association uses of AnsibleAWSModule: params, check_mode, warn."""

    def __init__(self, check_mode: bool = False, **overrides: Any) -> None:
        self.params = params(data_repository=LINK, **overrides)
        self.check_mode = check_mode
        self.warnings: list[str] = []

    def warn(self, text: str) -> None:
        self.warnings.append(text)


def stubbed() -> tuple[Any, Stubber]:
    client = Session().create_client(
        "fsx", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    return client, Stubber(client)


def association(path: str, target: str) -> dict[str, Any]:
    return {"AssociationId": "dra-0123456789abcdef0", "FileSystemPath": path, "DataRepositoryPath": target}


FILTER = {"Filters": [{"Name": "file-system-id", "Values": ["fs-0123456789abcdef0"]}]}


def test_missing_association_is_created() -> None:
    client, stub = stubbed()
    stub.add_response("describe_data_repository_associations", {"Associations": []}, FILTER)
    expected = fsx_lustre.association_request("fs-0123456789abcdef0", params(data_repository=LINK))
    stub.add_response(
        "create_data_repository_association",
        {"Association": association("/data", LINK["data_repository_path"])},
        expected,
    )
    with stub:
        assert fsx_lustre.ensure_association(FakeModule(), client, "fs-0123456789abcdef0") == (
            True,
            "dra-0123456789abcdef0",
        )
    stub.assert_no_pending_responses()


def test_existing_association_is_kept() -> None:
    """Second run: the path is linked already, nothing is created; a different target is only reported."""
    client, stub = stubbed()
    stub.add_response(
        "describe_data_repository_associations",
        {"Associations": [association("/data", "s3://elsewhere/")]},
        FILTER,
    )
    module = FakeModule()
    with stub:
        assert fsx_lustre.ensure_association(module, client, "fs-0123456789abcdef0") == (
            False,
            "dra-0123456789abcdef0",
        )
    stub.assert_no_pending_responses()
    assert "s3://elsewhere/" in module.warnings[0]


def test_check_mode_creates_no_association() -> None:
    client, stub = stubbed()
    stub.add_response("describe_data_repository_associations", {"Associations": []}, FILTER)
    with stub:
        assert fsx_lustre.ensure_association(FakeModule(check_mode=True), client, "fs-0123456789abcdef0") == (
            True,
            "",
        )
    stub.assert_no_pending_responses()
