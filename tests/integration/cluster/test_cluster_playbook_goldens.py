"""The five cluster playbooks (batch, eks, hyperpod, pcluster, pcs) against one moto server give their
goldens: what each renders for every example spec, the arguments it hands its last module, and the message it
stops with when the foundation's record or the AMI is missing or the record is another region's.

Each case runs one playbook the way a user does and keeps what it hands on: the arguments its tasks set on its
last module (the foundation mapped from the record, the AMI it found) with the requests that module rendered,
the playbook's closing message, or the message it stopped with. tests/data/cluster_playbooks/<case>.json holds
what the playbooks gave before their shared step (read the foundation's record, check it, find the AMI by
tags) became one module, trainstack.cluster.cluster_inputs; the same runs must give the same after the
normalising below.

The cases: every example spec each playbook takes (inventories/aws/{batch,eks,hyperpod,clusters}), rendered
without making anything (check mode, PCS's render_only; ParallelCluster's configuration file); an AMI given by
-e instead of tags; and the refusals: no record, a record of another region, no AMI carrying the tags,
state=absent without a record, pcluster_action=delete (which looks no AMI up). AMI ids, the moto URL,
temporary paths and the bundle's digest are replaced by names, so the goldens hold only what the playbooks
decide. Each case is one playbook run (5 to 15 s on a 2-core host); the four ParallelCluster renders build the
node bundle each (about 35 s), so they are marked slow.

TRAINSTACK_WRITE_GOLDENS=1 writes the goldens instead of comparing (only when the playbooks' behaviour is
meant to change; say so in the commit).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import CURRENT_STACK_ID, REPO, MotoServer, moto_aws_env, playbook, start_moto

pytestmark = [pytest.mark.moto, pytest.mark.cluster]

GOLDENS = REPO / "tests" / "data" / "cluster_playbooks"
WRITE = os.environ.get("TRAINSTACK_WRITE_GOLDENS") == "1"
SPECS = REPO / "inventories" / "aws"
# The example specs' image tags name the current stack.
STACK = CURRENT_STACK_ID
# The modules that end each playbook: their arguments and renders are the goldens.
LAST_MODULES = {
    f"trainstack.cluster.{name}"
    for name in ("batch_cluster", "eks_cluster", "hyperpod_cluster", "pcs_cluster", "pcluster_config")
}
# Arguments that are the same for every case or long and kept elsewhere: the spec (cluster_spec's, unchanged
# here), the collection's directories.
NOT_KEPT = {"spec", "stacks_dir", "testcases_dir"}
KEPT = ("requests", "request", "provisioning_parameters", "not_rendered", "created", "deleted", "text")
OTHER_OWNER = '{"%s_ami_owners": ["111122223333"]}'
GIVEN_AMI = "ami-0abcdef0123456789"
# AMIs the account holds, oldest first (the look-ups take the newest that carries the tags): name, region,
# tags. The pcs-gpu ones come first, so a ParallelCluster look-up by the spec's tags alone sees two and must
# take its own, the newer.
AMIS = (
    ("batch", "us-east-1", {"trainstack:stack": STACK, "trainstack:flavour": "batch-gpu"}),
    ("eks", "us-west-2", {"trainstack:stack": STACK, "trainstack:flavour": "eks-gpu"}),
    (
        "p4d-pcs",
        "us-east-1",
        {"trainstack:stack": STACK, "trainstack:role": "training", "trainstack:flavour": "pcs-gpu"},
    ),
    ("p4d-pcluster", "us-east-1", {"trainstack:stack": STACK, "trainstack:role": "training"}),
    ("g6e-pcs", "eu-west-1", {"Name": f"trainstack-{STACK}-amzn-2023", "trainstack:flavour": "pcs-gpu"}),
    ("g6e-pcluster", "eu-west-1", {"Name": f"trainstack-{STACK}-amzn-2023"}),
)


@dataclass(frozen=True)
class Case:
    """One playbook run: ``record`` is the foundation's record (match, none, or other: another region);
    ``unmatched_tags`` runs a copy of the spec whose image.tags no AMI carries."""

    name: str
    playbook: str
    spec: str
    record: str = "match"
    extra: tuple[str, ...] = ()
    unmatched_tags: bool = False
    check: bool = False
    marks: tuple[Any, ...] = field(default=())


def _cases() -> list[Case]:
    cases = [
        Case("batch-train-batch", "batch_cluster", "batch/train-batch.yml", check=True),
        Case("eks-train-eks", "eks_cluster", "eks/train-eks.yml", check=True),
        Case("hyperpod-train-hp", "hyperpod_cluster", "hyperpod/train-hp.yml", check=True),
        *(
            Case(f"pcs-{spec}", "pcs_cluster", f"clusters/{spec}.yml")
            for spec in ("g6e", "p4d", "p5", "p6-b200")
        ),
        *(
            Case(f"pcluster-{spec}", "pcluster_cluster", f"clusters/{spec}.yml", marks=(pytest.mark.slow,))
            for spec in ("g6e", "p4d", "p5", "p6-b200")
        ),
        Case(
            "batch-given-ami",
            "batch_cluster",
            "batch/train-batch.yml",
            check=True,
            extra=("-e", f"batch_cluster_ami_id={GIVEN_AMI}"),
        ),
        Case(
            "eks-given-ami",
            "eks_cluster",
            "eks/train-eks.yml",
            check=True,
            extra=("-e", f"eks_cluster_ami_id={GIVEN_AMI}"),
        ),
        Case(
            "pcs-given-ami",
            "pcs_cluster",
            "clusters/p4d.yml",
            extra=("-e", f"pcs_cluster_ami_id={GIVEN_AMI}"),
        ),
        Case(
            "pcluster-delete-looks-no-ami-up",
            "pcluster_cluster",
            "clusters/p4d.yml",
            extra=("-e", "pcluster_action=delete", "-e", OTHER_OWNER % "pcluster_cluster"),
        ),
    ]
    specs = {
        "batch_cluster": "batch/train-batch.yml",
        "eks_cluster": "eks/train-eks.yml",
        "hyperpod_cluster": "hyperpod/train-hp.yml",
        "pcs_cluster": "clusters/p4d.yml",
        "pcluster_cluster": "clusters/p4d.yml",
    }
    for book, spec in specs.items():
        short = book.removesuffix("_cluster")
        cases.append(Case(f"{short}-no-record", book, spec, record="none"))
        cases.append(Case(f"{short}-record-of-another-region", book, spec, record="other"))
        if book != "hyperpod_cluster":  # HyperPod boots its own images: no AMI to find
            cases.append(Case(f"{short}-no-ami-of-the-owner", book, spec, extra=("-e", OTHER_OWNER % book)))
        if book in ("batch_cluster", "eks_cluster", "hyperpod_cluster"):  # the others need PCS or pcluster
            cases.append(
                Case(
                    f"{short}-absent-needs-no-record",
                    book,
                    spec,
                    record="none",
                    check=True,
                    extra=("-e", f"{book}_state=absent"),
                )
            )
    cases.append(Case("pcluster-no-ami-of-self", "pcluster_cluster", "clusters/p4d.yml", unmatched_tags=True))
    return cases


CASES = _cases()


@dataclass
class World:
    moto: MotoServer
    amis: dict[str, str]  # AMI id -> name
    bundle: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    server = start_moto()
    amis = {}
    for index, (name, region, tags) in enumerate(AMIS):
        if index:
            time.sleep(1.1)  # creation dates count seconds: the order above is the order of their dates
        ec2 = server.client("ec2", region)
        image = ec2.register_image(Name=f"trainstack-golden-{name}", RootDeviceName="/dev/sda1")["ImageId"]
        ec2.create_tags(Resources=[image], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
        amis[image] = name
    for spec in ("g6e", "p4d", "p5", "p6-b200"):  # ParallelCluster checks the foundation's bucket
        data = yaml.safe_load((SPECS / "clusters" / f"{spec}.yml").read_text())
        s3 = server.client("s3", data["region"])
        where = (
            {}
            if data["region"] == "us-east-1"
            else {"CreateBucketConfiguration": {"LocationConstraint": data["region"]}}
        )
        s3.create_bucket(Bucket=_bucket(data["name"]), **where)
    bundle = tmp_path_factory.mktemp("bundle")
    yield World(server, amis, bundle)
    server.stop()


def _bucket(name: str) -> str:
    return f"trainstack-{name}-data"


def outputs(name: str, region: str) -> dict[str, str]:
    """A finished foundation's record, with every key any of the five playbooks reads."""
    return {
        "cluster_name": name,
        "region": region,
        "availability_zone": f"{region}a",
        "vpc_id": "vpc-0123456789abcdef0",
        "public_subnet_id": "subnet-0aaaaaaaaaaaaaaa1",
        "private_subnet_id": "subnet-0bbbbbbbbbbbbbbb2",
        "second_private_subnet_id": "subnet-0eeeeeeeeeeeeeee5",
        "security_group_id": "sg-0ccccccccccccccc3",
        "bucket": _bucket(name),
        "instance_role_arn": f"arn:aws:iam::123456789012:role/trainstack-{name}-node",
        "instance_profile_arn": f"arn:aws:iam::123456789012:instance-profile/aws-pcs/trainstack-{name}-node",
        "eks_cluster_role_arn": f"arn:aws:iam::123456789012:role/trainstack-{name}-eks-cluster",
        "eks_node_role_arn": f"arn:aws:iam::123456789012:role/trainstack-{name}-eks-node",
        "hyperpod_execution_role_arn": f"arn:aws:iam::123456789012:role/trainstack-{name}-hyperpod",
        "fsx_file_system_id": "fs-0ddddddddddddddd4",
        "fsx_dns_name": f"fs-0ddddddddddddddd4.fsx.{region}.amazonaws.com",
        "fsx_mount_name": "abcdefgh",
        "placement_group": f"trainstack-{name}",
    }


def _spec_file(case: Case, tmp_path: Path) -> Path:
    """The example spec, or a copy whose tags no AMI carries."""
    spec = SPECS / case.spec
    if not case.unmatched_tags:
        return spec
    data = yaml.safe_load(spec.read_text())
    data["image"]["tags"]["trainstack:role"] = "no-such-role"
    copy = tmp_path / "spec" / spec.name
    copy.parent.mkdir()
    copy.write_text(yaml.safe_dump(data, sort_keys=False))
    return copy


def _own_args(case: Case, world: World, tmp_path: Path, data: dict[str, Any]) -> list[str]:
    """What each playbook needs besides the spec and the record: directories, PCS's launch templates, a
    stand-in pcluster CLI and node bundle (HyperPod only copies it)."""
    if case.playbook == "pcs_cluster":
        template = {"id": "lt-0123456789abcdef0", "version": "1"}
        templates = {queue["name"]: template for queue in data["queues"]}
        return [
            "-e",
            "pcs_cluster_render_only=true",
            "-e",
            json.dumps({"pcs_cluster_launch_template": template, "pcs_cluster_launch_templates": templates}),
        ]
    if case.playbook == "pcluster_cluster":
        cli = tmp_path / "pcluster"
        cli.write_text(f"#!/bin/sh\necho 'Cluster {data['name']} does not exist.' >&2\nexit 1\n")
        cli.chmod(0o755)
        return [
            "-e",
            f"node_bundle_dir={world.bundle}",
            "-e",
            f"pcluster_cluster_config_dir={tmp_path / 'configs'}",
            "-e",
            f"pcluster_cluster_pcluster={cli}",
        ]
    if case.playbook == "hyperpod_cluster":
        bundle = tmp_path / "bundle"
        bundle.mkdir()
        (bundle / "node-bundle.tar.gz").write_bytes(b"stand-in for the node bundle\n")
        (bundle / "node-bundle.tar.gz.sha256").write_text(f"{'ab' * 32}  node-bundle.tar.gz\n")
        (bundle / "bootstrap.sh").write_text("#!/bin/sh\n")
        # A lifecycle directory of an earlier run: in check mode the copies into it need it to exist.
        (tmp_path / "lifecycle" / data["name"]).mkdir(parents=True)
        return [
            "-e",
            f"node_bundle_dir={bundle}",
            "-e",
            f"hyperpod_cluster_lifecycle_dir={tmp_path / 'lifecycle'}",
            "-e",
            "hyperpod_cluster_poll_interval=1",
        ]
    if case.playbook == "batch_cluster":
        return [
            "-e",
            "batch_cluster_poll_interval=1",
            "-e",
            "batch_cluster_image=registry.example/trainstack:1",
        ]
    return ["-e", f"{case.playbook}_poll_interval=1"]


def run_case(case: Case, world: World, tmp_path: Path) -> tuple[int, dict[str, Any]]:
    """Run the case's playbook with the JSON callback; its return code and its parsed report."""
    spec = _spec_file(case, tmp_path)
    data = yaml.safe_load(spec.read_text())
    records = tmp_path / "records"
    records.mkdir()
    if case.record != "none":
        region = "ap-south-1" if case.record == "other" else data["region"]
        (records / f"{data['name']}.foundation.json").write_text(json.dumps(outputs(data["name"], region)))
    done = playbook(
        case.playbook,
        "-e",
        f"cluster_spec={spec}",
        "-e",
        f"cluster_foundation_outputs_dir={records}",
        *_own_args(case, world, tmp_path, data),
        *case.extra,
        *(["--check"] if case.check else []),
        check=False,
        env=moto_aws_env(world.moto.url, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"),
        timeout=900,
    )
    try:
        return done.returncode, json.loads(done.stdout)
    except json.JSONDecodeError as error:
        raise AssertionError(
            f"no JSON report ({error}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        ) from None


def task_options(playbook_name: str) -> dict[str, set[str]]:
    """Task name -> the options the playbook's task sets, for its last modules: the golden keeps those
    arguments only, so that a default a module changes on its own leaves the goldens alone."""
    found: dict[str, set[str]] = {}

    def walk(tasks: list[dict[str, Any]]) -> None:
        for task in tasks:
            for part in ("block", "rescue", "always"):
                walk(task.get(part, []))
            for module in LAST_MODULES & set(task):
                found[task["name"]] = set(task[module])

    for play in yaml.safe_load((REPO / "playbooks" / f"{playbook_name}.yml").read_text()):
        walk(play.get("tasks", []))
    return found


def _kept(result: dict[str, Any], options: set[str]) -> dict[str, Any]:
    """What a last module decided: the arguments the playbook passed, and what it rendered."""
    kept = {key: result[key] for key in KEPT if key in result}
    passed = result.get("invocation", {}).get("module_args", {})
    kept["module_args"] = {key: passed[key] for key in sorted(options - NOT_KEPT) if key in passed}
    return kept


def summary(rc: int, report: dict[str, Any], options: dict[str, set[str]]) -> dict[str, Any]:
    """The golden of one run: the last modules' arguments and renders, the closing messages, the refusal."""
    found: dict[str, Any] = {"rc": rc, "last_modules": [], "said": [], "refused": []}
    for play in report["plays"]:
        for task in play["tasks"]:
            result = task["hosts"].get("localhost")
            if not result or result.get("skipped"):
                continue
            if result.get("failed"):
                failed = [item for item in result.get("results", []) if item.get("failed")] or [result]
                found["refused"] += [" ".join(str(item.get("msg", "")).split()) for item in failed]
            elif result.get("action") in LAST_MODULES:
                found["last_modules"].append(_kept(result, options[task["task"]["name"]]))
            elif result.get("action") == "ansible.builtin.debug" and task["task"]["name"].startswith(
                "Say what"
            ):
                found["said"].append(" ".join(str(result.get("msg", "")).split()))
    return found


def normalise(found: dict[str, Any], world: World, tmp_path: Path) -> dict[str, Any]:
    """Names for what differs between runs: AMI ids, the moto URL, temporary paths, the bundle's digest."""
    text = json.dumps(found, sort_keys=True)
    for image, name in world.amis.items():
        text = text.replace(image, f"<ami:{name}>")
    digest = world.bundle / "node-bundle.tar.gz.sha256"
    if digest.exists():
        text = text.replace(digest.read_text().split()[0], "<bundle-sha256>")
    text = text.replace(world.moto.url, "<moto>")
    text = text.replace(str(world.bundle), "<bundle>")
    text = text.replace(str(tmp_path), "<tmp>")
    text = text.replace(str(REPO), "<repo>")
    return json.loads(text)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name, marks=c.marks) for c in CASES])
def test_the_playbook_gives_its_golden(case: Case, world: World, tmp_path: Path) -> None:
    rc, report = run_case(case, world, tmp_path)
    found = normalise(summary(rc, report, task_options(case.playbook)), world, tmp_path)
    golden = GOLDENS / f"{case.name}.json"
    if WRITE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(json.dumps(found, indent=2, sort_keys=True) + "\n")
    assert golden.exists(), f"no golden {golden.relative_to(REPO)}: run with TRAINSTACK_WRITE_GOLDENS=1"
    expected = json.loads(golden.read_text())
    assert found == expected, "\n".join(
        difflib.unified_diff(_lines(expected), _lines(found), "golden", "now")
    )


def _lines(found: dict[str, Any]) -> list[str]:
    return json.dumps(found, indent=2, sort_keys=True).splitlines()


def test_every_golden_has_its_case() -> None:
    """A golden without a case is a case that was dropped: say so, rather than keep a file nothing checks."""
    names = {c.name for c in CASES}
    assert sorted(p.stem for p in GOLDENS.glob("*.json") if p.stem not in names) == []


def test_the_refusals_name_what_to_do() -> None:
    """The refusal goldens say the record or the AMI that is missing, and that nothing was made."""
    for case in CASES:
        golden = GOLDENS / f"{case.name}.json"
        if case.record == "none" and "absent" not in case.name and golden.exists():
            (refused,) = json.loads(golden.read_text())["refused"]
            assert re.search(r"no foundation record <tmp>/records/[\w-]+\.foundation\.json", refused), refused
            assert refused.endswith(
                (
                    "Nothing was sent.",
                    "Nothing was built, uploaded or sent.",
                    "Nothing was built, uploaded or rendered.",
                )
            ), refused
