"""The collection builds, installs from its tarball with no Galaxy server, and its playbooks run by FQCN."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import yaml

from tests.support import REPO, VENV_BIN, ansible_env, run


def _ansible_package_collections() -> str:
    """Where the `ansible` PyPI package keeps community.general, amazon.aws, ansible.posix and the rest."""
    site = next((VENV_BIN.parent / "lib").glob("python3*/site-packages"))
    return str(site)


def test_build_install_and_run_by_fqcn(tmp_path: Path) -> None:
    version = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    run([str(VENV_BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path), str(REPO)])
    tarball = tmp_path / f"trainstack-cluster-{version}.tar.gz"
    assert tarball.is_file()
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
    assert {"MANIFEST.json", "FILES.json", "meta/runtime.yml", "playbooks/ping.yml"} <= names
    assert not any(n.startswith((".venv", ".cache", ".git/")) for n in names), "build_ignore leaks"

    installed = tmp_path / "collections"
    # --offline: dependencies resolve against what is installed (the ansible package), never a Galaxy server.
    env = ansible_env(ANSIBLE_COLLECTIONS_PATH=f"{installed}:{_ansible_package_collections()}")
    env.pop("ANSIBLE_CONFIG")
    run(
        [
            str(VENV_BIN / "ansible-galaxy"),
            "collection",
            "install",
            "--offline",
            "-p",
            str(installed),
            str(tarball),
        ],
        env=env,
    )
    manifest = installed / "ansible_collections" / "trainstack" / "cluster" / "MANIFEST.json"
    assert manifest.is_file()

    proc = run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "trainstack.cluster.ping",
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={VENV_BIN / 'python'}",
        ],
        env=env,
        cwd=tmp_path,
    )
    assert "localhost: " in proc.stdout
    assert "ok=3" in proc.stdout
    # The installed copy ran, not this checkout.
    listing = run([str(VENV_BIN / "ansible-galaxy"), "collection", "list", "trainstack.cluster"], env=env)
    assert str(installed) in listing.stdout
    assert os.fspath(REPO) not in listing.stdout
