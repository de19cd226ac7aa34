"""The PCS agent as the pcs-gpu image gets it: its installer (a named stand-in: AWS's bucket is unreachable
here) served by the lab's artifact mirror under the stack's URL with the sha256 the mirror's lock records,
run into a directory, and checked by the pcs_agent role's own verify entry point, which refuses another
version. The host's facts choose the role's OS file; the stack target is an AMI system's (amzn-2023)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import yaml

from tests.support import LOCALHOST_ARGS, REPO, VENV_BIN, current_stack, run

MIRROR = REPO / "tests" / "integration" / "fabric" / "mirror.py"


def _mirror() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fabric_mirror_pcs", MIRROR)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _verify(tmp: Path, install_dir: Path) -> subprocess.CompletedProcess:
    play = tmp / "verify.yml"
    play.write_text(
        "- hosts: all\n  gather_facts: true\n  gather_subset: [min]\n  tasks:\n"
        "    - ansible.builtin.include_role:\n        name: trainstack.cluster.pcs_agent\n"
        "        tasks_from: verify\n"
    )
    return run(
        [
            str(VENV_BIN / "ansible-playbook"),
            *LOCALHOST_ARGS,
            str(play),
            *("-e", "trainstack_os=amzn-2023", "-e", "trainstack_arch=x86_64"),
            *("-e", f"pcs_agent_install_dir={install_dir}"),
        ],
        check=False,
    )


def test_the_mirrored_stand_in_installs_and_the_role_verifies_it(tmp_path: Path) -> None:
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
    assert "STAND-IN" in installer.read_text()
    root = tmp_path / "root"
    subprocess.run(
        [str(installer)], env={"PATH": "/usr/bin:/bin", "TRAINSTACK_STANDIN_ROOT": str(root)}, check=True
    )
    install_dir = root / "opt" / "aws" / "pcs"
    record = json.loads((install_dir / "version.json").read_text())
    assert record["AgentVersion"] == stack["components"]["pcs_agent"]["version"]

    # The image manifest's probe (what the self-check compares with the pin) reads the same record.
    probes = yaml.safe_load((REPO / "roles" / "image_manifest" / "vars" / "main.yml").read_text())
    probe = probes["__image_manifest_probes"]["pcs_agent"].replace("/opt/aws/pcs", str(install_dir))
    probed = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
    assert probed.stdout.strip() == record["AgentVersion"]

    passed = _verify(tmp_path, install_dir)
    assert passed.returncode == 0, passed.stdout[-3000:]
    assert "Check that the pinned agent is the installed one" in passed.stdout

    (install_dir / "version.json").write_text(json.dumps({**record, "AgentVersion": "0.9.0"}))
    refused = _verify(tmp_path, install_dir)
    assert refused.returncode != 0
    assert f"names agent version '0.9.0'; stack {stack['id']} pins {record['AgentVersion']}" in refused.stdout
