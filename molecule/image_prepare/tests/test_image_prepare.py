"""Verifier for roles/image_prepare: what it hands to the build (recorded on the node by the converge),
checked against the stack and playbooks/build_image.yml read here independently; the packages and certificate
authorities it puts into the image; the inputs it refuses."""

import hashlib
import json
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
FACTS = "/var/lib/image_prepare_facts.json"
REFUSALS = "/var/lib/image_prepare_refusals.json"
PACKAGES = [
    "openssh-server",
    "sudo",
    "python3",
    "python3-apt",
    "ca-certificates",
    "procps",
    "iproute2",
    "iputils-ping",
    "dbus",
    "systemd-sysv",
]
OS_ID, ARCH = "debian-12", "x86_64"


def _stack() -> dict:
    current = (REPO / "stacks" / "current").read_text().strip()
    return yaml.safe_load((REPO / "stacks" / f"{current}.yml").read_text())


def _expected_versions() -> dict[str, str]:
    """Component -> version the stack pins for Debian 12 on x86_64 (by_os overrides the common entry)."""
    pinned = {}
    for name, component in _stack()["components"].items():
        entry = {**component, **component.get("by_os", {}).get(OS_ID, {})}
        if OS_ID in entry.get("os", []) and ARCH in entry.get("arch", []) and entry.get("version"):
            pinned[name] = str(entry["version"])
    return pinned


def _flavour(name: str) -> list[dict]:
    plays = yaml.safe_load((REPO / "playbooks" / "build_image.yml").read_text())
    entries, todo = [], list(plays[1]["vars"]["image_flavours"][name])
    while todo:
        item = todo.pop(0)
        if isinstance(item, list):
            todo[:0] = item
        else:
            entries.append(item)
    return entries


@pytest.fixture(scope="module")
def facts(host) -> dict:
    return json.loads(host.file(FACTS).content_string)


def test_target_is_this_host_and_the_current_stack(host, facts):
    assert facts["target"] == {"stack": _stack()["id"], "os": OS_ID, "arch": host.check_output("uname -m")}


def test_versions_are_the_stacks_for_this_os(facts):
    expected = _expected_versions()
    assert expected, "the stack pins nothing for Debian 12: nothing to compare"
    assert facts["versions"] == expected


def test_plan_applies_pinned_roles_and_skips_the_rest_with_reason(facts):
    pinned = _expected_versions()
    entries = _flavour("slurm-gpu")
    apply = [e for e in entries if all(c in pinned for c in e["components"])]
    skipped = [e for e in entries if e not in apply]
    assert [e["role"] for e in facts["plan"]["apply"]] == [e["role"] for e in apply]
    # Debian carries no NVIDIA driver pin: the GPU roles must be skipped, and so visibly part of the plan.
    assert "nvidia_driver" in [e["role"] for e in facts["plan"]["skipped"]]
    assert [e["role"] for e in facts["plan"]["skipped"]] == [e["role"] for e in skipped]
    for entry in facts["plan"]["skipped"]:
        missing = [c for c in entry["components"] if c not in pinned]
        assert entry["reason"] == f"stack pins no {', '.join(missing)} for this OS/arch"


@pytest.mark.parametrize("name", PACKAGES)
def test_image_packages_installed(host, name):
    assert host.package(name).is_installed


def test_controller_certificate_authorities_trusted(host):
    cas = sorted(Path("/usr/local/share/ca-certificates").glob("*.crt"))
    if not cas:
        pytest.skip("the controller has no local certificate authority to copy")
    bundle = host.file("/etc/ssl/certs/ca-certificates.crt").content_string
    for ca in cas:
        copied = host.file(f"/usr/local/share/ca-certificates/{ca.name}")
        assert copied.mode == 0o644 and copied.user == "root"
        assert hashlib.sha256(copied.content).hexdigest() == hashlib.sha256(ca.read_bytes()).hexdigest()
        # In the rebuilt bundle, as the PEM body of the controller's file.
        body = "".join(line for line in ca.read_text().splitlines() if line and not line.startswith("-----"))
        assert body[:64] in bundle.replace("\n", ""), f"{ca.name} not in the trust store"


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("unknown_flavour", "image_prepare_flavour=gpu-typo is not one of base-gpu, slurm-gpu"),
        ("unknown_role", "role no_such_role is not a role of this collection"),
        (
            "no_install_entry_point",
            "role image_manifest has no install entry point (roles/image_manifest/tasks/install.yml)",
        ),
    ],
)
def test_bad_input_refused_naming_it(host, case, message):
    refusals = json.loads(host.file(REFUSALS).content_string)
    assert message in refusals[case]
