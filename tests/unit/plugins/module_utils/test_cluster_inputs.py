"""module_utils/cluster/cluster_inputs.py: the rules every cluster playbook applies to the foundation's record
and to the AMI, without AWS (DescribeImages is a function handed in; here one that records what it was asked).

The refusals are checked word for word: the five playbooks showed these exact messages before the rules moved
here (tests/data/cluster_playbooks holds them as the playbooks give them).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.cluster_inputs import (
    InputsError,
    Refusal,
    Request,
    check_record,
    choose_ami,
    describe_params,
    lookup_tags,
    newest,
    read_record,
    request_from_spec,
    resolve,
)

from tests.support import CURRENT_STACK_ID

pytestmark = pytest.mark.cluster

STACK_TAG = {"trainstack:stack": CURRENT_STACK_ID}
BATCH = Refusal(ami_variable="batch_cluster_ami_id")
PCLUSTER = Refusal(
    nothing_done="Nothing was built, uploaded or rendered.",
    record_note="it records the foundation's outputs there",
    ami_variable="pcluster_cluster_ami_id",
    name_owners=True,
)
BATCH_TAGS = json.dumps({**STACK_TAG, "trainstack:flavour": "batch-gpu"})
RECORD = {"cluster_name": "train-batch", "region": "us-east-1", "private_subnet_id": "subnet-0b"}


def request(**changes: Any) -> Request:
    """The Batch playbook's question for inventories/aws/batch/train-batch.yml."""
    base: dict[str, Any] = {
        "name": "train-batch",
        "region": "us-east-1",
        "spec_file": "inventories/aws/batch/train-batch.yml",
        "records_dir": "build/clusters",
        "tags": {**STACK_TAG, "trainstack:flavour": "batch-gpu"},
        "flavour": "batch-gpu",
        "refusal": BATCH,
    }
    return Request(**{**base, **changes})


class Describe:
    """DescribeImages as a list of answers; ``asked`` holds each request's arguments."""

    def __init__(self, *images: dict[str, str]) -> None:
        self.images = list(images)
        self.asked: list[dict[str, Any]] = []

    def __call__(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        self.asked.append(params)
        return self.images


def image(ami: str, created: str) -> dict[str, str]:
    return {"ImageId": ami, "CreationDate": created}


# ------------------------------------------------------------------ the record
def test_a_missing_record_says_which_file_and_to_run_the_foundation_first() -> None:
    with pytest.raises(InputsError) as refused:
        read_record(request(), None)
    assert str(refused.value) == (
        "cluster_spec inventories/aws/batch/train-batch.yml: no foundation record "
        "build/clusters/train-batch.foundation.json; run ansible-playbook "
        "trainstack.cluster.cluster_foundation -e cluster_spec=inventories/aws/batch/train-batch.yml first. "
        "Nothing was sent."
    )


def test_a_playbook_adds_its_note_and_its_own_last_sentence() -> None:
    with pytest.raises(InputsError) as refused:
        read_record(request(refusal=PCLUSTER), None)
    assert str(refused.value).endswith(
        "first (it records the foundation's outputs there). Nothing was built, uploaded or rendered."
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{not json", "build/clusters/train-batch.foundation.json: not a foundation record (JSON): "),
        ('["a", "list"]', "a foundation record is a JSON object of the foundation's outputs, not list."),
    ],
)
def test_a_record_that_is_not_an_object_of_outputs_is_refused(text: str, said: str) -> None:
    with pytest.raises(InputsError, match="Nothing was sent") as refused:
        read_record(request(), text)
    assert said in str(refused.value)


def test_the_record_is_read_as_written() -> None:
    assert read_record(request(), json.dumps(RECORD)) == RECORD


@pytest.mark.parametrize(
    ("record", "of"),
    [
        ({**RECORD, "region": "ap-south-1"}, "train-batch in ap-south-1"),
        ({**RECORD, "cluster_name": "train-other"}, "train-other in us-east-1"),
        ({"private_subnet_id": "subnet-0b"}, "? in ?"),
    ],
)
def test_a_record_of_another_cluster_or_region_is_refused(record: dict[str, str], of: str) -> None:
    with pytest.raises(InputsError) as refused:
        check_record(request(), record)
    assert str(refused.value) == (
        f"build/clusters/train-batch.foundation.json: the record is of cluster {of}, not train-batch in "
        "us-east-1. Nothing was sent."
    )


def test_without_match_record_a_later_step_judges_the_record() -> None:
    check_record(request(match_record=False), {**RECORD, "region": "ap-south-1"})


# ------------------------------------------------------------------ the AMI
def test_the_flavour_is_added_unless_the_spec_names_one() -> None:
    assert lookup_tags(request(tags=STACK_TAG)) == {"trainstack:flavour": "batch-gpu", **STACK_TAG}
    named = {**STACK_TAG, "trainstack:flavour": "eks-gpu"}
    assert lookup_tags(request(tags=named)) == named
    assert lookup_tags(request(tags=STACK_TAG, flavour="")) == STACK_TAG


def test_owners_are_asked_for_as_ec2_ami_info_asks() -> None:
    params = describe_params(STACK_TAG, ["self", "111122223333", "amazon"])
    assert params["Owners"] == ["self"]
    assert params["Filters"] == [
        {"Name": "tag:trainstack:stack", "Values": [CURRENT_STACK_ID]},
        {"Name": "state", "Values": ["available"]},
        {"Name": "owner-id", "Values": ["111122223333"]},
        {"Name": "owner-alias", "Values": ["amazon"]},
    ]
    assert "Owners" not in describe_params(STACK_TAG, ["111122223333"])


def test_the_newest_image_wins_and_a_tie_goes_to_the_last_listed() -> None:
    images = [image("ami-2", "2026-12-02T00:00:00.000Z"), image("ami-1", "2026-12-01T00:00:00.000Z")]
    assert newest(images) == "ami-2"
    tie = [image("ami-a", "2026-12-02T00:00:00.000Z"), image("ami-b", "2026-12-02T00:00:00.000Z")]
    assert newest(tie) == "ami-b"


def test_the_variable_wins_then_the_spec_then_the_tags() -> None:
    describe = Describe(image("ami-0c0c0c0c0c0c0c0c0", "2026-12-01T00:00:00.000Z"))
    given = "ami-0a0a0a0a0a0a0a0a0"
    spec = "ami-0b0b0b0b0b0b0b0b0"
    assert choose_ami(request(given_ami=given, spec_ami=spec), describe) == (given, "ami_id", {})
    assert choose_ami(request(spec_ami=spec), describe) == (spec, "spec", {})
    assert describe.asked == []  # neither asks AWS
    assert choose_ami(request(), describe) == (
        "ami-0c0c0c0c0c0c0c0c0",
        "tags",
        {"trainstack:flavour": "batch-gpu", **STACK_TAG},
    )
    assert len(describe.asked) == 1


def test_a_run_that_needs_no_ami_asks_nothing() -> None:
    describe = Describe()
    assert choose_ami(request(find_ami=False), describe) == ("", "", {})
    assert describe.asked == []


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        (
            {},
            f"image.tags {BATCH_TAGS}: no available AMI "
            "in us-east-1 carries these tags and trainstack:flavour batch-gpu; build one (make image-ami "
            "IMAGE_FLAVOUR=batch-gpu) or pass -e batch_cluster_ami_id=ami-... Nothing was sent.",
        ),
        (
            {
                "tags": {**STACK_TAG, "trainstack:flavour": "eks-gpu"},
                "region": "us-west-2",
                "flavour": "",
                "refusal": Refusal(
                    build="make image-ami IMAGE_FLAVOUR=eks-gpu", ami_variable="eks_cluster_ami_id"
                ),
            },
            f"image.tags {json.dumps({**STACK_TAG, 'trainstack:flavour': 'eks-gpu'})}: no available "
            "AMI in us-west-2 carries these tags; build one (make image-ami IMAGE_FLAVOUR=eks-gpu) or pass "
            "-e eks_cluster_ami_id=ami-... Nothing was sent.",
        ),
        (
            {
                "tags": {**STACK_TAG, "trainstack:role": "training"},
                "flavour": "",
                "owners": ("self", "111122223333"),
                "refusal": PCLUSTER,
            },
            f"image.tags {json.dumps({**STACK_TAG, 'trainstack:role': 'training'})}: no available AMI "
            "of self, 111122223333 in us-east-1 carries these tags; build one (make image-ami) or pass "
            "-e pcluster_cluster_ami_id=ami-... Nothing was built, uploaded or rendered.",
        ),
        (
            {"refusal": Refusal()},
            f"image.tags {BATCH_TAGS}: no available AMI "
            "in us-east-1 carries these tags and trainstack:flavour batch-gpu; build one (make image-ami "
            "IMAGE_FLAVOUR=batch-gpu) or set image.ami_id. Nothing was sent.",
        ),
    ],
    ids=["batch", "eks", "pcluster-owners", "no-variable"],
)
def test_no_ami_says_the_tags_the_region_and_the_ways_forward(changes: dict[str, Any], said: str) -> None:
    with pytest.raises(InputsError) as refused:
        choose_ami(request(**changes), Describe())
    assert str(refused.value) == said


# ------------------------------------------------------------------ the whole question
def test_the_record_is_judged_before_any_ami_is_looked_up() -> None:
    describe = Describe(image("ami-0c0c0c0c0c0c0c0c0", "2026-12-01T00:00:00.000Z"))
    with pytest.raises(InputsError, match="no foundation record"):
        resolve(request(), None, describe)
    with pytest.raises(InputsError, match="the record is of cluster"):
        resolve(request(), json.dumps({**RECORD, "region": "eu-west-1"}), describe)
    assert describe.asked == []


def test_resolve_answers_the_record_and_the_ami() -> None:
    found = resolve(request(), json.dumps(RECORD), Describe(image("ami-0c0c0c0c0c0c0c0c0", "2026")))
    assert found.record_path == "build/clusters/train-batch.foundation.json"
    assert found.outputs == RECORD
    assert (found.ami_id, found.ami_source) == ("ami-0c0c0c0c0c0c0c0c0", "tags")


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"given_ami": "ubuntu"}, "ami_id: must be an AMI id, ami- and 8 to 17 hex digits (got ubuntu)"),
        ({"owners": ()}, "owners: must name at least one AMI owner"),
        ({"tags": {}}, "spec.image.tags: the spec needs tags to find its AMI by, or image.ami_id"),
    ],
)
def test_what_no_look_up_can_answer_is_refused_naming_the_key(changes: dict[str, Any], said: str) -> None:
    with pytest.raises(InputsError, match=said.replace("(", r"\(").replace(")", r"\)")):
        resolve(request(**changes), json.dumps(RECORD), Describe())


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ({"region": "us-east-1", "image": {"ami_id": "ami-0a0a0a0a"}}, "spec.name: is required"),
        ({"name": "x", "image": {"ami_id": "ami-0a0a0a0a"}}, "spec.region: is required"),
        ({"name": "x", "region": "us-east-1"}, "spec.image: is required"),
        (
            {"name": "x", "region": "us-east-1", "image": {"tags": ["a"]}},
            "spec.image.tags: must be a mapping",
        ),
    ],
)
def test_a_spec_without_what_the_rules_read_is_refused(spec: dict[str, Any], said: str) -> None:
    with pytest.raises(InputsError, match=said):
        request_from_spec(spec, spec_file="s.yml", records_dir="r")


def test_a_spec_gives_its_name_region_tags_and_ami() -> None:
    spec = {"name": "train-p5", "region": "us-west-2", "image": {"ami_id": "ami-0123456789abcdef0"}}
    made = request_from_spec(spec, spec_file="s.yml", records_dir="r")
    assert (made.name, made.region, made.spec_ami, dict(made.tags)) == (
        "train-p5",
        "us-west-2",
        "ami-0123456789abcdef0",
        {},
    )
