"""trainstack.cluster.cluster_inputs, run in process: against a real moto server for the AMI look-up, and
against an endpoint nothing listens on where the module must not call AWS at all (a call would fail there
with a connection error instead of the answer the test expects).

The account holds AMIs of two flavours with the same stack tag, the pcs-gpu one the older: a look-up that
forgot the flavour would take the slurm-gpu one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.trainstack.cluster.plugins.modules import cluster_inputs

from tests.support import CURRENT_STACK_ID, REPO, MotoServer, start_moto

pytestmark = [pytest.mark.cluster, pytest.mark.moto]

REGION = "us-east-1"
STACK = {"trainstack:stack": CURRENT_STACK_ID, "trainstack:role": "training"}
SPEC = {"name": "train-p4d", "region": REGION, "image": {"tags": STACK, "os": "ubuntu-22.04"}}
SPEC_FILE = str(REPO / "inventories" / "aws" / "clusters" / "p4d.yml")
NOWHERE = "http://127.0.0.1:9"  # the discard port: nothing answers, so any AWS call fails
RECORD = {"cluster_name": "train-p4d", "region": REGION, "private_subnet_id": "subnet-0bbbbbbbbbbbbbbb2"}


@pytest.fixture
def run_module(capsys: pytest.CaptureFixture[str]):
    from ansible.module_utils.testing import patch_module_args

    def run(**args: Any) -> dict[str, Any]:
        capsys.readouterr()
        with patch_module_args(args), pytest.raises(SystemExit):
            cluster_inputs.main()
        return json.loads(capsys.readouterr().out)

    return run


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = start_moto()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def amis(moto: MotoServer) -> dict[str, str]:
    """flavour -> AMI id; pcs-gpu first, so that slurm-gpu is the newer."""
    ec2 = moto.client("ec2", REGION)
    made = {}
    for flavour in ("pcs-gpu", "slurm-gpu"):
        if made:
            time.sleep(1.1)  # creation dates count seconds
        ami = ec2.register_image(Name=f"trainstack-{flavour}", RootDeviceName="/dev/sda1")["ImageId"]
        tags = {**STACK, "trainstack:flavour": flavour}
        ec2.create_tags(Resources=[ami], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
        made[flavour] = ami
    return made


@pytest.fixture
def records(tmp_path: Path) -> Path:
    (tmp_path / "train-p4d.foundation.json").write_text(json.dumps(RECORD))
    return tmp_path


def args(records: Path, endpoint: str, **changes: Any) -> dict[str, Any]:
    return {
        "spec": SPEC,
        "spec_file": SPEC_FILE,
        "records_dir": str(records),
        "endpoint_url": endpoint,
        "access_key": "testing",
        "secret_key": "testing",
        **changes,
    }


def test_in_check_mode_the_flavour_s_newest_ami_is_found(run_module, moto, amis, records) -> None:
    res = run_module(**args(records, moto.url, flavour="pcs-gpu"), _ansible_check_mode=True)
    assert res["changed"] is False and not res.get("failed"), res
    assert res["ami_id"] == amis["pcs-gpu"]
    assert res["ami_source"] == "tags"
    assert res["ami_tags"] == {"trainstack:flavour": "pcs-gpu", **STACK}
    assert res["outputs"] == RECORD
    assert res["record_path"] == f"{records}/train-p4d.foundation.json"


def test_without_a_flavour_the_newest_ami_of_the_tags_is_taken(run_module, moto, amis, records) -> None:
    assert run_module(**args(records, moto.url))["ami_id"] == amis["slurm-gpu"]


def test_no_ami_of_the_owner_is_refused_in_the_playbook_s_words(run_module, moto, amis, records) -> None:
    refusal = {
        "nothing_done": "Nothing was built, uploaded or rendered.",
        "ami_variable": "pcluster_cluster_ami_id",
        "name_owners": True,
    }
    res = run_module(**args(records, moto.url, owners=["111122223333"], refusal=refusal))
    assert res["failed"] is True
    assert res["msg"] == (
        f"image.tags {json.dumps(STACK)}: no available AMI of "
        "111122223333 in us-east-1 carries these tags; build one (make image-ami) or pass "
        "-e pcluster_cluster_ami_id=ami-... Nothing was built, uploaded or rendered."
    )


def test_a_missing_record_stops_before_any_aws_call(run_module, tmp_path) -> None:
    res = run_module(**args(tmp_path, NOWHERE, flavour="pcs-gpu"))
    assert res["failed"] is True
    assert res["msg"] == (
        f"cluster_spec {SPEC_FILE}: no foundation record {tmp_path}/train-p4d.foundation.json; run "
        f"ansible-playbook trainstack.cluster.cluster_foundation -e cluster_spec={SPEC_FILE} first. "
        "Nothing was sent."
    )


def test_a_record_of_another_region_stops_before_any_aws_call(run_module, tmp_path) -> None:
    (tmp_path / "train-p4d.foundation.json").write_text(json.dumps({**RECORD, "region": "eu-west-1"}))
    res = run_module(
        **args(tmp_path, NOWHERE, refusal={"nothing_done": "Nothing was built, uploaded or sent."})
    )
    assert res["msg"] == (
        f"{tmp_path}/train-p4d.foundation.json: the record is of cluster train-p4d in eu-west-1, not "
        "train-p4d in us-east-1. Nothing was built, uploaded or sent."
    )
    unchecked = run_module(**args(tmp_path, NOWHERE, match_record=False, find_ami=False))
    assert unchecked["outputs"]["region"] == "eu-west-1"  # left to the pcluster_foundation filter


@pytest.mark.parametrize(
    ("changes", "ami", "source"),
    [
        ({"ami_id": "ami-0abcdef0123456789"}, "ami-0abcdef0123456789", "ami_id"),
        ({"spec": {**SPEC, "image": {"ami_id": "ami-0fedcba9876543210"}}}, "ami-0fedcba9876543210", "spec"),
        ({"find_ami": False}, "", ""),
    ],
    ids=["variable", "spec", "none-asked"],
)
def test_an_ami_given_or_not_asked_for_needs_no_aws(run_module, records, changes, ami, source) -> None:
    res = run_module(**args(records, NOWHERE, **changes))
    assert not res.get("failed"), res
    assert (res["ami_id"], res["ami_source"], res["ami_tags"]) == (ami, source, {})


def test_a_malformed_ami_id_is_refused_naming_the_option(run_module, records) -> None:
    res = run_module(**args(records, NOWHERE, ami_id="ubuntu"))
    assert res["msg"] == "ami_id: must be an AMI id, ami- and 8 to 17 hex digits (got ubuntu)"


def test_a_spec_without_a_region_is_refused_naming_the_key(run_module, records) -> None:
    res = run_module(**args(records, NOWHERE, spec={"name": "train-p4d", "image": {"tags": STACK}}))
    assert res["msg"].startswith("spec.region: is required")
