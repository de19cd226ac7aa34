"""Stack structure, resolution per OS/arch and version comparison (stack_matrix.py)."""

import re

import pytest
from ansible_collections.trainstack.cluster.plugins.module_utils.stack import stack_matrix as sm


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        ("2.29.7", "2.29.7", 0),
        ("12", "12.0.0", 0),
        ("2.9.1", "2.13.0", -1),
        ("595.91.07", "580.65.06", 1),
        ("2.13.0+cpu", "2.13.0", 0),
        ("1.7.3-aws", "1.7.3", 0),
    ],
)
def test_compare_versions(left, right, expected):
    assert sm.compare_versions(left, right) == expected


def test_parse_version_rejects_non_versions():
    with pytest.raises(sm.StackError, match="not a version"):
        sm.parse_version("latest")


def test_current_stack_pins_the_supported_floor(shipped_stacks):
    """One current stack: driver 595, CUDA 13, EFA installer 1.47+, aws-ofi-nccl 1.18+, and a predecessor."""
    current = [s for s in shipped_stacks.values() if s["status"] == "current"]
    assert len(current) == 1
    stack = current[0]
    versions = sm.versions(stack, "ubuntu-24.04", "x86_64")
    assert versions["nvidia_driver"].startswith("595.")
    assert sm.parse_version(versions["cuda"])[0] == 13
    assert sm.compare_versions(versions["efa_installer"], "1.47") >= 0
    assert sm.compare_versions(versions["aws_ofi_nccl"], "1.18") >= 0
    assert stack["previous"] in shipped_stacks


def test_checksums_are_real_or_null(shipped_stacks):
    """No placeholder digests: every sha256 is 64 hex or null, and stacks with a null say so."""
    for stack in shipped_stacks.values():
        sm.validate_stack(stack)
        digests = [a["sha256"] for a in sm.all_artifacts(stack)]
        assert len(set(d for d in digests if d)) == len([d for d in digests if d]), "duplicate digest"
        if None in digests:
            assert stack["checksums_complete"] is False


def test_resolve_applies_by_os_and_drops_other_arches(shipped_stacks):
    stack = shipped_stacks["ts-2026.10"]
    lab = sm.resolve(stack, "debian-12", "x86_64")
    assert lab["slurm"]["version"] == "22.05.8"
    assert lab["pytorch"]["variant"] == "cpu"
    assert "nvidia_driver" not in lab
    ami = sm.resolve(stack, "ubuntu-22.04", "aarch64")
    assert [a["name"] for a in ami["nvidia_driver"]["artifacts"]] == ["nvidia-driver-run-aarch64"]
    assert ami["slurm"]["version"] == "25.11.8"


def test_lab_os_has_no_instance_family_targets(shipped_stacks):
    targets = sm.targets(shipped_stacks["ts-2026.10"], "debian-12", "x86_64")
    assert [str(t) for t in targets] == ["debian-12/x86_64"]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s.pop("scope"), "scope: is required"),
        (lambda s: s["scope"].update(arch=["ppc64le"]), "scope.arch[0]: 'ppc64le' is not one of"),
        (lambda s: s["components"]["cuda"].pop("source"), "components.cuda.source: is required"),
        (
            lambda s: s["components"]["cuda"].update(artifacts=[{"name": "x", "url": "https://e.invalid/x"}]),
            "components.cuda.artifacts[0].sha256: is required",
        ),
        (
            lambda s: s["components"]["cuda"].update(artifacts=[{"name": "x", "url": "u", "sha256": "abc"}]),
            "components.cuda.artifacts[0].sha256: 'abc' does not match",
        ),
        (lambda s: s["components"]["cuda"].update(by_os={"debian-12": {}}), "by_os.debian-12"),
        (lambda s: s["scope"].update(lab_os=["debian-12"]), "scope.lab_os: 'debian-12'"),
    ],
)
def test_validate_stack_names_the_bad_key(good_stack, mutate, message):
    mutate(good_stack)
    with pytest.raises(sm.StackError, match=re.escape(message)):
        sm.validate_stack(good_stack)


def test_validate_rules(rules):
    sm.validate_rules(rules)
    with pytest.raises(sm.StackError, match="citation"):
        sm.validate_rules([{"id": "x", "kind": "equal_fields"}])
    with pytest.raises(sm.StackError, match="unknown kind 'nope'"):
        sm.validate_rules([{"id": "x", "kind": "nope", "citation": "c"}])
    with pytest.raises(sm.StackError, match="used twice"):
        sm.validate_rules([rules[0], rules[0]])


def test_targets_outside_scope_are_refused(good_stack):
    with pytest.raises(sm.StackError, match="os 'amzn-2023' is outside scope"):
        sm.targets(good_stack, "amzn-2023", "x86_64")


def test_unverified_notes_respect_the_lock(shipped_stacks):
    stack = shipped_stacks["ts-2026.10"]
    efa = next(a for a in sm.all_artifacts(stack) if a["name"] == "aws-efa-installer")
    names = {n.message.split(" ")[0] for n in sm.unverified_notes(stack)}
    assert "aws-efa-installer" in names and "torch-cp311-x86_64" not in names
    lock = {"artifacts": {"aws-efa-installer": {"url": efa["url"], "sha256": "a" * 64}}}
    assert "aws-efa-installer" not in {n.message.split(" ")[0] for n in sm.unverified_notes(stack, lock)}
    stale = {"artifacts": {"aws-efa-installer": {"url": efa["url"] + ".old", "sha256": "a" * 64}}}
    assert "aws-efa-installer" in {n.message.split(" ")[0] for n in sm.unverified_notes(stack, stale)}


def test_duplicate_artifact_names_are_refused(good_stack):
    art = {"name": "dup", "url": "https://e.invalid/a", "sha256": None}
    good_stack["components"]["cuda"]["artifacts"] = [art]
    good_stack["components"]["nccl"]["artifacts"] = [{**art, "url": "https://e.invalid/b"}]
    with pytest.raises(sm.StackError, match="used for two URLs"):
        sm.all_artifacts(good_stack)


def test_errors_collapse_across_targets(good_stack, rules):
    good_stack["scope"]["arch"] = ["x86_64", "aarch64"]
    for comp in good_stack["components"].values():
        comp["arch"] = ["x86_64", "aarch64"]
    good_stack["components"]["nvidia_driver"]["version"] = "570.1"
    report = sm.check(good_stack, [r for r in rules if r["id"] == "cuda-driver-minimum"])
    toolkit = [e for e in report.errors if "cuda.version" in e.message]
    assert len(toolkit) == 1
    assert "ubuntu-24.04/aarch64/p5" in toolkit[0].target
