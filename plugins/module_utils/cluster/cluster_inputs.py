# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""What a cluster playbook needs before it renders anything: the foundation's record and the AMI.

Why one place: the Batch, EKS, HyperPod, ParallelCluster and PCS playbooks all read the record
cluster_foundation wrote (<records>/<name>.foundation.json), refuse a missing one or one of another cluster,
and find the image factory's AMI by the spec's image.tags. Each rule lives here once, as a function that a
unit test can call; the one AWS call (DescribeImages) is made by a function the caller passes in, so nothing
here needs AWS or Ansible. Each playbook keeps only its own wording of what it has not done yet
(:class:`Refusal`) and its own mapping of the record onto its module's foundation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.cluster_spec import FLAVOUR_TAG

AMI_ID = re.compile(r"^ami-[0-9a-f]{8,17}$")
# What DescribeImages is asked, and what it answers: the caller's function makes the call.
Describe = Callable[[dict[str, Any]], list[dict[str, Any]]]


class InputsError(Exception):
    """A refusal: the message names the key or file, the rule, and what to do about it."""


@dataclass(frozen=True)
class Refusal:
    """How one playbook words the end of its refusals. The rules are shared; what a playbook has not done
    yet when it stops (sent, built, uploaded, rendered) and how a user gets an AMI differ per playbook."""

    nothing_done: str = "Nothing was sent."
    record_note: str = ""  # said after "run cluster_foundation ... first", in parentheses
    build: str = ""  # how to build an AMI the look-up would find
    ami_variable: str = ""  # the variable that passes an AMI id instead
    name_owners: bool = False  # whether the no-AMI refusal names the owners searched


@dataclass(frozen=True)
class Request:
    """One playbook's question: which cluster, where its record lies, and how to find its AMI."""

    name: str
    region: str
    spec_file: str  # as the user named it (-e cluster_spec=...), for messages only
    records_dir: str
    tags: Mapping[str, str] = field(default_factory=dict)  # the spec's image.tags
    spec_ami: str = ""  # the spec's image.ami_id
    given_ami: str = ""  # the playbook's -e <x>_ami_id
    flavour: str = ""
    owners: Sequence[str] = ("self",)
    match_record: bool = True
    find_ami: bool = True
    refusal: Refusal = field(default_factory=Refusal)


@dataclass(frozen=True)
class Inputs:
    """The answer: the record's outputs and the AMI, with where the AMI came from."""

    record_path: str
    outputs: dict[str, Any]
    ami_id: str
    ami_source: str  # ami_id, spec, tags, or "" where no AMI was asked for
    ami_tags: dict[str, str]


def record_path(records_dir: str, name: str) -> str:
    """Where cluster_foundation records a cluster's outputs; joined as written, so that a refusal shows the
    path the user gave."""
    return f"{records_dir}/{name}.foundation.json"


def read_record(request: Request, text: str | None) -> dict[str, Any]:
    """The record's outputs from its text (None: no such file). A missing record means the foundation was
    never made (or is recorded elsewhere): every later step would render a cluster into nothing."""
    path = record_path(request.records_dir, request.name)
    refusal = request.refusal
    if text is None:
        note = f" ({refusal.record_note})" if refusal.record_note else ""
        raise InputsError(
            f"cluster_spec {request.spec_file}: no foundation record {path}; run ansible-playbook "
            f"trainstack.cluster.cluster_foundation -e cluster_spec={request.spec_file} first{note}. "
            f"{refusal.nothing_done}"
        )
    try:
        outputs = json.loads(text)
    except ValueError as error:
        raise InputsError(
            f"{path}: not a foundation record (JSON): {error}; run ansible-playbook "
            f"trainstack.cluster.cluster_foundation -e cluster_spec={request.spec_file} again. "
            f"{refusal.nothing_done}"
        ) from None
    if not isinstance(outputs, dict):
        raise InputsError(
            f"{path}: a foundation record is a JSON object of the foundation's outputs, not "
            f"{type(outputs).__name__}. {refusal.nothing_done}"
        )
    return outputs


def check_record(request: Request, outputs: Mapping[str, Any]) -> None:
    """Refuse another cluster's record, or one of another region: its subnets and roles would put this
    cluster's nodes into another cluster's network."""
    if not request.match_record:
        return
    if outputs.get("cluster_name", "") == request.name and outputs.get("region", "") == request.region:
        return
    raise InputsError(
        f"{record_path(request.records_dir, request.name)}: the record is of cluster "
        f"{outputs.get('cluster_name', '?')} in {outputs.get('region', '?')}, not {request.name} in "
        f"{request.region}. {request.refusal.nothing_done}"
    )


def lookup_tags(request: Request) -> dict[str, str]:
    """The tags the AMI must carry: the spec's, with the playbook's flavour unless the spec names one. An
    account that builds several flavours from one stack holds AMIs that differ only in that tag."""
    tags = {FLAVOUR_TAG: request.flavour} if request.flavour else {}
    tags.update(request.tags)
    return tags


def describe_params(tags: Mapping[str, str], owners: Sequence[str]) -> dict[str, Any]:
    """DescribeImages' arguments: available AMIs carrying every tag, of the owners. Account ids and aliases
    go in as filters and ``self`` as Owners, as amazon.aws.ec2_ami_info sends them (the API is slow with
    other Owners values, and has no owner-alias for self)."""
    filters: dict[str, list[str]] = {f"tag:{key}": [value] for key, value in tags.items()}
    filters["state"] = ["available"]
    params: dict[str, Any] = {}
    for owner in owners:
        if owner == "self":
            params["Owners"] = ["self"]
        else:
            filters.setdefault("owner-id" if owner.isdigit() else "owner-alias", []).append(owner)
    params["Filters"] = [{"Name": name, "Values": values} for name, values in filters.items()]
    return params


def newest(images: Sequence[Mapping[str, Any]]) -> str:
    """The newest image's id; among images of the same second, the last one listed (a stable sort, as the
    playbooks took it). The image factory tags each build alike, so the newest is the latest build."""
    return sorted(images, key=lambda image: image.get("CreationDate", ""))[-1]["ImageId"]


def no_ami_message(request: Request) -> str:
    """The refusal when no AMI carries the tags: which tags, where, and the two ways forward."""
    refusal = request.refusal
    owners = f" of {', '.join(request.owners)}" if refusal.name_owners else ""
    flavour = f" and {FLAVOUR_TAG} {request.flavour}" if request.flavour else ""
    build = refusal.build or "make image-ami" + (
        f" IMAGE_FLAVOUR={request.flavour}" if request.flavour else ""
    )
    given = f" or pass -e {refusal.ami_variable}=ami-..." if refusal.ami_variable else " or set image.ami_id."
    return (
        f"image.tags {json.dumps(dict(request.tags))}: no available AMI{owners} in {request.region} carries "
        f"these tags{flavour}; build one ({build}){given} {refusal.nothing_done}"
    )


def choose_ami(request: Request, describe: Describe) -> tuple[str, str, dict[str, str]]:
    """The AMI and where it came from: the playbook's variable, else the spec's image.ami_id, else the newest
    AMI carrying the tags (looked up only then, and only when the playbook asks for an AMI at all)."""
    if request.given_ami:
        return request.given_ami, "ami_id", {}
    if request.spec_ami:
        return request.spec_ami, "spec", {}
    if not request.find_ami:
        return "", "", {}
    tags = lookup_tags(request)
    images = describe(describe_params(tags, request.owners))
    if not images:
        raise InputsError(no_ami_message(request))
    return newest(images), "tags", tags


def check_request(request: Request) -> None:
    """Refuse what no look-up can answer, naming the key: a malformed AMI id, no owner, no tags to search."""
    for key, value in (("ami_id", request.given_ami), ("spec.image.ami_id", request.spec_ami)):
        if value and not AMI_ID.match(value):
            raise InputsError(f"{key}: must be an AMI id, ami- and 8 to 17 hex digits (got {value})")
    if request.find_ami and not (request.given_ami or request.spec_ami):
        if not request.owners:
            raise InputsError("owners: must name at least one AMI owner (account id, self, amazon)")
        if not request.tags:
            raise InputsError("spec.image.tags: the spec needs tags to find its AMI by, or image.ami_id")


def resolve(request: Request, text: str | None, describe: Describe) -> Inputs:
    """Every rule in order, the record before the AMI (a record of another cluster makes its AMI moot)."""
    check_request(request)
    outputs = read_record(request, text)
    check_record(request, outputs)
    ami_id, source, tags = choose_ami(request, describe)
    return Inputs(record_path(request.records_dir, request.name), outputs, ami_id, source, tags)


def request_from_spec(spec: Mapping[str, Any], **options: Any) -> Request:
    """A Request from a checked spec (trainstack.cluster.cluster_spec's ``spec``) and the playbook's
    options; a spec without the keys the rules read is refused naming the key."""
    for key in ("name", "region"):
        if not isinstance(spec.get(key), str) or not spec[key]:
            raise InputsError(f"spec.{key}: is required (a string): pass the spec cluster_spec returned")
    image = spec.get("image")
    if not isinstance(image, Mapping):
        raise InputsError("spec.image: is required (a mapping with tags or ami_id)")
    tags = image.get("tags") or {}
    if not isinstance(tags, Mapping):
        raise InputsError("spec.image.tags: must be a mapping of tag names to values")
    return Request(
        name=spec["name"],
        region=spec["region"],
        tags={str(key): str(value) for key, value in tags.items()},
        spec_ami=str(image.get("ami_id") or ""),
        **options,
    )
