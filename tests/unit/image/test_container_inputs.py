"""build_container.yml's input rules, evaluated by Ansible's templar from the playbook's own first play: a
valid request passes every rule, each bad value fails the rule about it with a message naming the variable,
the source mirror's lock is read once and its artifacts kept for the layer plays; and a bad registry URL stops
the playbook before any buildah command runs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from tests.support import REPO, VENV_BIN, ansible_env, case_params, run, trust_role_data

PLAYBOOK = REPO / "playbooks" / "build_container.yml"


def first_play(
    monkeypatch: pytest.MonkeyPatch, isolation: str = "chroot", *, keep: bool = True, **overrides: Any
) -> dict[str, Any]:
    """``{"refusal": the messages of the input rules this request breaks, "facts": what the play keeps}``,
    as the playbook's first play renders them: its tasks' set_facts in order (the source mirror's lock, read
    once; after the refusal, with ``keep``, the checked inputs the later plays read) and the refusal's own
    message (the flavour table's and the request's problems, the lock's, then the other rules). A refused
    request keeps nothing."""
    monkeypatch.setenv("BUILDAH_ISOLATION", isolation)
    play = yaml.safe_load(PLAYBOOK.read_text())[0]
    variables = {**trust_role_data(play["vars"]), "playbook_dir": str(PLAYBOOK.parent), **overrides}
    facts: dict[str, Any] = {}
    refusal: list[str] | None = None
    for task in play["tasks"]:
        templar = Templar(loader=DataLoader(), variables=variables)
        if "ansible.builtin.assert" in task:
            message = task["ansible.builtin.assert"]["fail_msg"]
            refusal = [str(m) for m in templar.template(trust_as_template(message))]
            if refusal or not keep:
                return {"refusal": refusal, "facts": {} if refusal else facts}
            continue
        for name, value in task["ansible.builtin.set_fact"].items():
            facts[name] = variables[name] = templar.template(trust_as_template(value))
    if refusal is None:
        raise AssertionError(f"{PLAYBOOK}: the first play refuses nothing")
    return {"refusal": refusal, "facts": facts}


def failed_rules(monkeypatch: pytest.MonkeyPatch, isolation: str = "chroot", **overrides: Any) -> list[str]:
    """Messages of the input rules this request breaks (first_play, up to its refusal)."""
    return first_play(monkeypatch, isolation, keep=False, **overrides)["refusal"]


GOOD = [
    ("defaults", {}),
    ("https registry with namespace", {"container_registry_url": "https://registry.example.com/ml/train"}),
    ("https registry with port", {"container_registry_url": "https://10.0.0.5:5000"}),
    (
        "lab registry over http",
        {"container_registry_url": "http://10.77.0.1:8673", "container_registry_allow_http": True},
    ),
    ("base only", {"container_flavours": ["base"]}),
    ("docker schema 2 push", {"container_registry_format": "v2s2"}),
    ("dotted repository", {"container_repository": "team.a/trainstack_images"}),
]

BAD = [
    ("ftp scheme", {"container_registry_url": "ftp://registry.example.com"}, "container_registry_url=ftp://"),
    ("no scheme", {"container_registry_url": "registry.example.com"}, "must be http(s)://host"),
    ("credentials", {"container_registry_url": "https://user:secret@registry.example.com"}, "credentials"),
    ("query", {"container_registry_url": "https://registry.example.com/ns?x=1"}, "container_registry_url="),
    (
        "http without consent",
        {"container_registry_url": "http://10.77.0.1:8673"},
        "container_registry_allow_http=true",
    ),
    (
        "port out of range",
        {"container_registry_url": "https://registry.example.com:70000"},
        "port must be 1-65535",
    ),
    (
        "upper-case namespace",
        {"container_registry_url": "https://registry.example.com/ML"},
        "namespace after the host",
    ),
    (
        "trailing slash",
        {"container_registry_url": "https://registry.example.com/ns/"},
        "namespace after the host",
    ),
    ("upper-case repository", {"container_repository": "TrainStack"}, "container_repository=TrainStack"),
    (
        "repository with a tag",
        {"container_repository": "trainstack:latest"},
        "container_repository=trainstack:latest",
    ),
    (
        "unknown flavour",
        {"container_flavours": ["base", "jax"]},
        "container_flavours: jax is not a container flavour",
    ),
    ("flavours as a string", {"container_flavours": "base"}, "container_flavours must be a non-empty list"),
    ("empty flavours", {"container_flavours": []}, "container_flavours must be a non-empty list"),
    (
        "unknown parent",
        {"container_image_flavours": {"a": {"parent": "b", "image_flavour": "base-gpu"}}},
        "parent",
    ),
    ("name too long", {"container_repository": "a" * 250}, "at most 255 characters"),
    (
        "unknown push format",
        {"container_registry_format": "v2s1"},
        "container_registry_format=v2s1: must be oci",
    ),
]


@pytest.mark.parametrize(("overrides",), case_params([(c[0], c[1]) for c in GOOD]))
def test_valid_inputs_pass_every_rule(monkeypatch: pytest.MonkeyPatch, overrides: dict) -> None:
    assert failed_rules(monkeypatch, **overrides) == []


@pytest.mark.parametrize(("overrides", "fragment"), case_params(BAD))
def test_each_bad_input_fails_its_rule(
    monkeypatch: pytest.MonkeyPatch, overrides: dict, fragment: str
) -> None:
    messages = failed_rules(monkeypatch, **overrides)
    assert any(fragment in m for m in messages), messages


def test_the_source_mirrors_lock_must_be_a_lock_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """The playbook's wiring of the lock's check (its rules: test_container_flavours.py)."""
    lock = tmp_path / "lock.json"
    lock.write_text('{"artifacts": {"aws-efa-installer": {"url": "https://x/i.tar.gz", "sha256": "00"}}}')
    assert failed_rules(monkeypatch, container_source_mirror_lock=str(lock)) == []
    (tmp_path / "other.json").write_text('{"artifacts": []}')
    for bad in (tmp_path / "missing.json", tmp_path / "other.json"):
        messages = failed_rules(monkeypatch, container_source_mirror_lock=str(bad))
        refusal = f"container_source_mirror_lock={bad}: a lock file"
        assert [m for m in messages if m.startswith(refusal)], messages


def test_the_checked_inputs_carry_the_locks_artifacts(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """The lock's artifacts, read once, are what the layer plays hand to the CUDA layers' downloads and keys;
    no lock, none."""
    artifacts = {"aws-efa-installer": {"url": "https://x/i.tar.gz", "sha256": "00"}}
    lock = tmp_path / "lock.json"
    lock.write_text(json.dumps({"format": 1, "artifacts": artifacts}))
    kept = first_play(monkeypatch, container_source_mirror_lock=str(lock))["facts"]
    assert kept["container_source_mirror_artifacts"] == artifacts
    assert first_play(monkeypatch)["facts"]["container_source_mirror_artifacts"] == {}


def test_buildah_must_run_in_chroot_isolation(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = failed_rules(monkeypatch, isolation="oci")
    assert any(m.startswith("BUILDAH_ISOLATION=oci") for m in messages), messages


def test_a_bad_registry_url_stops_the_playbook_before_anything_runs(tmp_path: Any) -> None:
    proc = run(
        [
            str(VENV_BIN / "ansible-playbook"),
            str(PLAYBOOK),
            "-e",
            "container_registry_url=http://user:pw@10.77.0.1:8673",
            "-e",
            f"container_build_dir={tmp_path / 'out'}",
        ],
        env=ansible_env(BUILDAH_ISOLATION="chroot"),
        timeout=300,
        check=False,
    )
    assert proc.returncode != 0
    assert "container_registry_url: credentials do not belong in the URL" in proc.stdout
    assert "Plan the layers" not in proc.stdout and "Check the training stack" not in proc.stdout
    assert not (tmp_path / "out").exists()
