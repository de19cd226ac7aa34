"""Verifier for roles/pcs_agent on a lab container: what the installer left on the node, what the mirror
served (AWS's installer is a named stand-in here, see molecule.yml), and the role's own entry points against a
version record that names another version.

Runs the role's entry points from here with the scenario's inventory, as a boot (configure/verify) or an image
rebuild (install) would on the same node."""

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.molecule_runs import changed as count_changed
from tests.molecule_runs import run_entry_point

REPO = Path(__file__).resolve().parents[3]
SCENARIO = Path(__file__).resolve().parents[1]
CURRENT = (REPO / "stacks" / "current").read_text().strip()
PIN = yaml.safe_load((REPO / "stacks" / f"{CURRENT}.yml").read_text())["components"]["pcs_agent"]
RECORD = "/opt/aws/pcs/version.json"
WORK = "/var/cache/trainstack/pcs-agent"
TARBALL_PATH = "/aws-pcs-agent/" + PIN["artifacts"][0]["url"].rsplit("/", 1)[-1]


@pytest.fixture(scope="module")
def scenario_vars(host):
    return host.ansible.get_variables()


@pytest.fixture(scope="module")
def mirror(scenario_vars) -> Path:
    return Path(scenario_vars["pcs_mirror_dir"])


def downloads(mirror: Path) -> list[str]:
    """The installer requests the mirror answered in this run (prepare starts it with an empty log)."""
    log = (mirror / ".server.log").read_text()
    return [line for line in log.splitlines() if f'"GET {TARBALL_PATH} ' in line]


def entry_point(name: str) -> subprocess.CompletedProcess:
    return run_entry_point(SCENARIO / "entry_point.yml", "pcs_agent_entry_point", name)


def changed(run: subprocess.CompletedProcess) -> int:
    return count_changed(run, "ts-m-pcs-agent")


def test_record_names_the_pinned_version(host):
    record = host.file(RECORD)
    assert record.user == "root"
    data = json.loads(record.content_string)
    assert data["AgentVersion"] == PIN["version"]
    # The stand-in says it is one, so that nothing here passes for AWS's agent.
    assert data["StandIn"] is True


def test_agent_installed_by_the_installer(host):
    agent = host.file("/opt/aws/pcs/bin/pcs_agent")
    assert agent.mode == 0o755
    assert host.check_output(agent.path).startswith(f"pcs_agent {PIN['version']} (STAND-IN")


def test_image_manifest_probe_reads_the_pin(host):
    """What the image's manifest and self-check record for the agent, read on the node."""
    probes = yaml.safe_load((REPO / "roles" / "image_manifest" / "vars" / "main.yml").read_text())
    assert host.check_output(probes["__image_manifest_probes"]["pcs_agent"]) == PIN["version"]


def test_download_is_the_locked_installer(host, mirror):
    lock = json.loads((mirror / "lock.json").read_text())["artifacts"]["aws-pcs-agent"]
    assert lock["url"] == PIN["artifacts"][0]["url"] and lock["standin"] is True
    on_node = host.file("/var/cache/trainstack/pcs-agent-mirror.lock.json").content_string
    assert json.loads(on_node) == json.loads((mirror / "lock.json").read_text())
    tarball = host.file(f"{WORK}{TARBALL_PATH}")
    assert tarball.sha256sum == lock["sha256"]
    assert lock["sha256"] == hashlib.sha256((mirror / TARBALL_PATH.lstrip("/")).read_bytes()).hexdigest()
    installer = host.file(f"{WORK}/aws-pcs-agent-{PIN['version']}/installer.sh")
    assert installer.mode == 0o755 and "STAND-IN" in installer.content_string


def test_fetched_once_over_converge_and_idempotence(host, mirror):
    (line,) = downloads(mirror)
    assert line.startswith(f"{host.interface('eth0').addresses[0]} ") and '" 200 ' in line


def test_verify_refuses_another_version_and_install_puts_the_pin_back(host, mirror):
    """A record naming 0.9.0 (an image whose agent drifted): verify fails and says why; install runs the
    cached installer again (no second download) and the record names the pin."""
    original = json.loads(host.file(RECORD).content_string)
    drifted = json.dumps({**original, "AgentVersion": "0.9.0"})
    host.run_expect([0], f"printf '%s\\n' '{drifted}' > {RECORD}")

    refused = entry_point("verify")
    assert refused.returncode == 2, refused.stdout[-3000:]
    assert f"names agent version '0.9.0'; stack {CURRENT} pins {PIN['version']}" in refused.stdout

    again = entry_point("install")
    assert again.returncode == 0, again.stdout[-3000:]
    assert "TASK [trainstack.cluster.pcs_agent : Run AWS's PCS agent installer]" in again.stdout
    assert changed(again) > 0
    assert json.loads(host.file(RECORD).content_string)["AgentVersion"] == PIN["version"]
    assert len(downloads(mirror)) == 1

    unchanged = entry_point("verify")
    assert unchanged.returncode == 0 and changed(unchanged) == 0, unchanged.stdout[-3000:]
