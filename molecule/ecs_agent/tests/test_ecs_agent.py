"""Verifier for roles/ecs_agent on a lab container: the pinned ecs-init (a named stand-in package from a
signed local repository, see molecule.yml) though a newer one is offered, the agent's configuration with GPU
support and no cluster, its service enabled and not started; then the role's own entry points against a node
that drifted (GPU support switched off, the package upgraded) and against a cluster named in an image.

Runs the role's entry points from here with the scenario's inventory, as a boot (configure/verify) or an image
rebuild (install) would on the same node."""

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.molecule_runs import changed as count_changed
from tests.molecule_runs import run_entry_point

REPO = Path(__file__).resolve().parents[3]
SCENARIO = Path(__file__).resolve().parents[1]
CURRENT = (REPO / "stacks" / "current").read_text().strip()
PIN = yaml.safe_load((REPO / "stacks" / f"{CURRENT}.yml").read_text())["components"]["ecs_agent"]
PACKAGE = PIN["packages"][0]
INSTALLED = f"{PIN['version']}-1~standin"
CONFIG = "/etc/ecs/ecs.config"
GPU_SETTINGS = ["ECS_ENABLE_GPU_SUPPORT=true", "ECS_NVIDIA_RUNTIME=nvidia"]


@pytest.fixture(scope="module")
def expected_lines(host) -> list[str]:
    extra = host.ansible.get_variables()["ecs_agent_config_extra"]
    assert extra, "the scenario sets extra settings, so that the merge is seen"
    return sorted(GPU_SETTINGS + [f"{key}={value}" for key, value in extra.items()])


def settings(host) -> list[str]:
    return [line for line in host.file(CONFIG).content_string.splitlines() if not line.startswith("#")]


def entry_point(name: str, *extra: str) -> subprocess.CompletedProcess:
    return run_entry_point(SCENARIO / "entry_point.yml", "ecs_agent_entry_point", name, *extra)


def changed(run: subprocess.CompletedProcess) -> int:
    return count_changed(run, "ts-m-ecs-agent")


def test_pinned_package_though_a_newer_is_offered(host):
    assert host.check_output(f"dpkg-query -W -f='${{Version}}' {PACKAGE}") == INSTALLED
    policy = host.check_output(f"apt-cache policy {PACKAGE}")
    candidate = re.search(r"Candidate: (\S+)", policy).group(1)
    host.run_expect([0], f"dpkg --compare-versions {candidate} gt {INSTALLED}")
    # The stand-in says it is one, so that nothing here passes for Amazon's agent.
    assert "stand-in" in host.check_output(f"dpkg-query -W -f='${{Description}}' {PACKAGE}")


def test_image_manifest_probe_reads_the_pin(host):
    """What the image's manifest and self-check record for the agent, read on the node."""
    probes = yaml.safe_load((REPO / "roles" / "image_manifest" / "vars" / "main.yml").read_text())
    assert host.check_output(probes["__image_manifest_probes"]["ecs_agent"]) == INSTALLED


def test_configuration_turns_on_gpus_and_names_no_cluster(host, expected_lines):
    config = host.file(CONFIG)
    assert (config.user, config.group, config.mode) == ("root", "root", 0o644)
    assert settings(host) == expected_lines
    assert "ECS_CLUSTER=" not in config.content_string


def test_service_enabled_not_started(host):
    """The stand-in package has no maintainer scripts: enabled is the role's doing. Not started: an image
    build's instance belongs to no cluster."""
    assert host.run("systemctl is-enabled ecs").stdout.strip() == "enabled"
    assert host.run("systemctl is-active ecs").stdout.strip() == "inactive"
    assert host.file("/etc/systemd/system/multi-user.target.wants/ecs.service").is_symlink


def test_a_cluster_named_in_the_image_is_refused_before_any_change(host):
    before = host.file(CONFIG).sha256sum
    refused = entry_point("install", "-e", '{"ecs_agent_config_extra": {"ECS_CLUSTER": "train"}}')
    assert refused.returncode == 2, refused.stdout[-3000:]
    assert "and not ECS_CLUSTER (an image names no cluster" in refused.stdout
    assert "TASK [trainstack.cluster.ecs_agent : Install the pinned ECS agent package]" not in refused.stdout
    assert host.file(CONFIG).sha256sum == before


def test_verify_refuses_drift_and_install_puts_the_settings_back(host, expected_lines):
    """GPU support switched off, then the package upgraded (what `apt upgrade` on a running image does):
    verify names each; the package put back as an operator would, install rewrites the settings."""
    host.run_expect([0], f"sed -i 's/^ECS_ENABLE_GPU_SUPPORT=true$/ECS_ENABLE_GPU_SUPPORT=false/' {CONFIG}")
    assert "ECS_ENABLE_GPU_SUPPORT=false" in settings(host)
    no_gpu = entry_point("verify")
    assert no_gpu.returncode == 2, no_gpu.stdout[-3000:]
    assert f"{CONFIG} must hold {expected_lines!r} (GPU jobs through the NVIDIA runtime)" in no_gpu.stdout

    newer = re.search(r"Candidate: (\S+)", host.check_output(f"apt-cache policy {PACKAGE}")).group(1)
    host.run_expect([0], f"DEBIAN_FRONTEND=noninteractive apt-get install -y {PACKAGE}={newer}")
    upgraded = entry_point("verify")
    assert upgraded.returncode == 2, upgraded.stdout[-3000:]
    assert f"package {PACKAGE} is '{newer}'; stack {CURRENT} pins {PIN['version']}" in upgraded.stdout

    host.run_expect(
        [0], f"DEBIAN_FRONTEND=noninteractive apt-get install -y --allow-downgrades {PACKAGE}={INSTALLED}"
    )
    repaired = entry_point("install")
    assert repaired.returncode == 0 and changed(repaired) == 1, repaired.stdout[-3000:]
    assert settings(host) == expected_lines
