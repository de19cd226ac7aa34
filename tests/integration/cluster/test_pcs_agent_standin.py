"""The PCS agent as the pcs-gpu image gets it: its installer (a named stand-in: AWS's bucket is out of the
lab's reach) served over HTTP by the lab's artifact mirror under the stack's URL with the sha256 the
mirror's lock records, installed by the pcs_agent role's install entry point into a directory, read by the
image manifest's probe, and checked by the role's verify entry point, which refuses another version. The
host's facts choose the role's OS file; the stack target is an AMI system's (amzn-2023)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.support import LOCALHOST_ARGS, REPO, VENV_BIN, current_stack, run, serve_directory

MIRROR = REPO / "scripts" / "fabric_mirror.py"


def _mirror() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fabric_mirror_pcs", MIRROR)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _role(tmp: Path, entry: str, install_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    """The role's entry point on this machine, for an AMI system's stack target (amzn-2023)."""
    play = tmp / f"{entry}.yml"
    play.write_text(
        "- hosts: all\n  gather_facts: true\n  gather_subset: [min]\n  tasks:\n"
        "    - ansible.builtin.include_role:\n        name: trainstack.cluster.pcs_agent\n"
        f"        tasks_from: {entry}\n"
    )
    return run(
        [
            str(VENV_BIN / "ansible-playbook"),
            *LOCALHOST_ARGS,
            str(play),
            *("-e", "trainstack_os=amzn-2023", "-e", "trainstack_arch=x86_64"),
            *("-e", f"pcs_agent_install_dir={install_dir}"),
            *extra,
        ],
        check=False,
    )


def _probe(install_dir: Path) -> str:
    """The image manifest's probe of the agent (what the self-check compares with the pin), on this
    directory."""
    probes = yaml.safe_load((REPO / "roles" / "image_manifest" / "vars" / "main.yml").read_text())
    probe = probes["__image_manifest_probes"]["pcs_agent"].replace("/opt/aws/pcs", str(install_dir))
    return subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True).stdout.strip()


def test_the_mirrored_stand_in_writes_the_record_the_image_manifest_reads(tmp_path: Path) -> None:
    """The fast part: the mirror serves the stand-in under the stack's URL with its sha256 in the mirror's
    lock; run into a directory, it writes version.json as AWS's installer does; the probe reads the pin."""
    stack = current_stack()
    (artifact,) = stack["components"]["pcs_agent"]["artifacts"]
    lock = _mirror().build(REPO / "stacks" / f"{stack['id']}.yml", tmp_path / "mirror")
    entry = lock["artifacts"]["aws-pcs-agent"]
    served = tmp_path / "mirror" / "aws-pcs-agent" / artifact["url"].rsplit("/", 1)[-1]
    assert entry["url"] == artifact["url"] and entry["standin"] is True
    assert entry["sha256"] == hashlib.sha256(served.read_bytes()).hexdigest()
    with tarfile.open(served) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    installer = tmp_path / "unpacked" / "aws-pcs-agent" / "installer.sh"
    root = tmp_path / "root"
    env = {"PATH": "/usr/bin:/bin", "TRAINSTACK_STANDIN_ROOT": str(root)}
    subprocess.run([str(installer)], env=env, check=True, capture_output=True)
    assert _probe(root / "opt" / "aws" / "pcs") == stack["components"]["pcs_agent"]["version"]


@pytest.mark.slow
def test_the_role_installs_the_mirrored_stand_in_once_and_verify_refuses_another_version(
    tmp_path: Path,
) -> None:
    """Fetched through the artifact layer, unpacked and run (the stand-in told by its own variable to install
    under a directory: the command's environment is the role's trainstack_proxy_env), checked; a second run
    fetches and runs nothing; a version.json naming another version fails verify."""
    stack = current_stack()
    (artifact,) = stack["components"]["pcs_agent"]["artifacts"]
    mirror_dir = tmp_path / "mirror"
    lock = _mirror().build(REPO / "stacks" / f"{stack['id']}.yml", mirror_dir)
    entry = lock["artifacts"]["aws-pcs-agent"]
    served = mirror_dir / "aws-pcs-agent" / artifact["url"].rsplit("/", 1)[-1]
    assert entry["url"] == artifact["url"] and entry["standin"] is True
    assert entry["sha256"] == hashlib.sha256(served.read_bytes()).hexdigest()
    with tarfile.open(served) as tar:
        assert "STAND-IN" in tar.extractfile("aws-pcs-agent/installer.sh").read().decode()

    root = tmp_path / "root"
    install_dir = root / "opt" / "aws" / "pcs"
    with serve_directory(mirror_dir) as (url, requested):
        extra = (
            *("-e", f"artifact_mirror_url={url}", "-e", f"artifact_lock_file={mirror_dir / 'lock.json'}"),
            *("-e", f"pcs_agent_work_dir={tmp_path / 'work'}"),
            *("-e", json.dumps({"trainstack_proxy_env": {"TRAINSTACK_STANDIN_ROOT": str(root)}})),
            # The stand-in is not AWS's file: the digest AWS publishes (the stack's lock) cannot match it, so
            # the role gets the artifact without it and the mirror's lock vouches for the stand-in's bytes.
            *("-e", json.dumps({"pcs_agent_artifacts": [{**artifact, "sha256": None}]})),
        )
        first = _role(tmp_path, "install", install_dir, *extra)
        assert first.returncode == 0, first.stdout[-4000:]
        assert "Check that the pinned agent is the installed one" in first.stdout
        fetched = [path for path in requested if path.startswith("/aws-pcs-agent/")]
        assert fetched == [f"/aws-pcs-agent/{served.name}"]
        record = json.loads((install_dir / "version.json").read_text())
        assert record["AgentVersion"] == stack["components"]["pcs_agent"]["version"]
        assert "STAND-IN" in (install_dir / "bin" / "pcs_agent").read_text()
        again = _role(tmp_path, "install", install_dir, *extra)
        assert again.returncode == 0 and re.search(r"^localhost\s.*\bchanged=0\b", again.stdout, re.M), (
            again.stdout
        )
        assert [path for path in requested if path.startswith("/aws-pcs-agent/")] == fetched

    assert _probe(install_dir) == record["AgentVersion"]

    (install_dir / "version.json").write_text(json.dumps({**record, "AgentVersion": "0.9.0"}))
    refused = _role(tmp_path, "verify", install_dir)
    assert refused.returncode != 0
    assert f"names agent version '0.9.0'; stack {stack['id']} pins {record['AgentVersion']}" in refused.stdout
