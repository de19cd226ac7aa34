"""Every package repository a role adds is trusted through a pinned key, never a key fetched as is.

A repository's signing key vouches for every package it serves; a role that fetched it with get_url (or
apt_key, or a dnf `gpgkey:` URL) would trust whatever key the network returned. The NVIDIA and FSx repository
roles install keys through trainstack.cluster.repo_key, which refuses a key whose fingerprint is not pinned.
"""

import re
from pathlib import Path

import pytest
import yaml

from tests.support import REPO

# A get_url whose URL or destination looks like a signing key (key_url, keyring, .asc, .pub, gpg).
KEY_HINT = re.compile(r"key|gpg|\.asc\b|\.pub\b", re.IGNORECASE)


def tasks(path: Path):
    """Every task of a task file, blocks flattened."""
    pending = list(yaml.safe_load(path.read_text()) or [])
    while pending:
        task = pending.pop()
        pending.extend(task.get("block", []) + task.get("rescue", []) + task.get("always", []))
        yield task


TASK_FILES = sorted((REPO / "roles").glob("*/tasks/*.yml"))


@pytest.mark.parametrize("path", TASK_FILES, ids=lambda p: str(p.relative_to(REPO / "roles")))
def test_repository_keys_go_through_repo_key(path):
    for task in tasks(path):
        name = task.get("name", "?")
        assert "ansible.builtin.apt_key" not in task and "apt_key" not in task, f"{path}: {name} uses apt_key"
        for module in ("ansible.builtin.get_url", "get_url"):
            args = task.get(module) or {}
            where = f"{args.get('url', '')} {args.get('dest', '')}"
            assert not KEY_HINT.search(where), f"{path}: {name} fetches a key with get_url ({where})"
        repo = task.get("ansible.builtin.yum_repository") or {}
        if repo.get("gpgcheck"):
            assert str(repo.get("gpgkey", "")).startswith("file://"), f"{path}: {name} trusts a key URL as is"


@pytest.mark.parametrize(
    ("role", "vars_file", "fingerprints"),
    [
        ("cuda", "ubuntu-24.04.yml", ["EB693B3035CD5710E231E123A4B469963BF863CC"]),
        ("cuda", "ubuntu-22.04.yml", ["EB693B3035CD5710E231E123A4B469963BF863CC"]),
        ("cuda", "debian-12.yml", ["EB693B3035CD5710E231E123A4B469963BF863CC"]),
        ("container_runtime", "main.yml", ["C95B321B61E88C1809C4F759DDCAE044F796ECB0"]),
    ],
)
def test_vendor_keys_are_pinned(role, vars_file, fingerprints):
    data = yaml.safe_load((REPO / "roles" / role / "vars" / vars_file).read_text())
    assert data[f"__{role}_repo_key_fingerprints"] == fingerprints
