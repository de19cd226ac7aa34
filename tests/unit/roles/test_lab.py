"""The lab role's names and paths that reach a container name, `rm -rf` or a removed file: the rules, rendered
by Ansible's templar from the role's defaults and vars, and node removal run as molecule's destroy runs it
(include_role tasks_from remove_nodes.yml) against this machine, where a bad name must stop it before any
command runs.
"""

from __future__ import annotations

import base64
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from tests.support import (
    REPO,
    VENV_BIN,
    assert_task_failure,
    render_role_template,
    role_data_templar,
    run,
    template_value,
)

ROLE = REPO / "roles" / "lab"
SHARED = "/srv/lab-shared"  # a fine shared directory, for cases about the state directory it defaults under


def failed(**overrides: Any) -> list[str]:
    loader = DataLoader()
    variables: dict[str, Any] = {"role_path": str(ROLE)}
    variables |= loader.load_from_file(str(ROLE / "defaults" / "main.yml"), trusted_as_template=True)
    variables |= overrides
    variables |= loader.load_from_file(str(ROLE / "vars" / "main.yml"), trusted_as_template=True)
    templar = Templar(loader=loader, variables=variables)
    return templar.template(
        trust_as_template("{{ __lab_path_rules | rejectattr('ok') | map(attribute='msg') | list }}")
    )


def test_defaults_and_the_test_labs_settings_pass() -> None:
    assert failed() == []
    assert failed(lab_name="ts-m", lab_inventory_file="/tmp/molecule/x/lab-hosts.yml") == []


@pytest.mark.parametrize(
    ("overrides", "start"),
    [
        ({"lab_name": ""}, "lab_name ''"),
        ({"lab_name": ".."}, "lab_name '..'"),
        ({"lab_name": ".*"}, "lab_name '.*'"),
        ({"lab_name": "ts/x"}, "lab_name 'ts/x'"),
        ({"lab_name": "TS"}, "lab_name 'TS'"),
        ({"lab_state_dir": "/", "lab_shared_dir": SHARED}, "lab_state_dir '/'"),
        ({"lab_state_dir": "/var", "lab_shared_dir": SHARED}, "lab_state_dir '/var'"),
        ({"lab_state_dir": "", "lab_shared_dir": SHARED}, "lab_state_dir ''"),
        ({"lab_state_dir": "/var/lib/..", "lab_shared_dir": SHARED}, "lab_state_dir '/var/lib/..'"),
        ({"lab_state_dir": "var/lib/lab", "lab_shared_dir": SHARED}, "lab_state_dir 'var/lib/lab'"),
        ({"lab_state_dir": "/srv/x", "lab_shared_dir": "/srv/./y"}, "lab_shared_dir '/srv/./y'"),
        ({"lab_cache_dir": "/.."}, "lab_cache_dir '/..'"),
        ({"lab_run_dir": "/run"}, "lab_run_dir '/run'"),
        ({"lab_run_dir": "/run/../etc"}, "lab_run_dir '/run/../etc'"),
        ({"lab_proxy_cache_dir": "/var"}, "lab_proxy_cache_dir '/var'"),
        ({"lab_shared_mount": "/"}, "lab_shared_mount '/'"),
        ({"lab_inventory_file": "/"}, "lab_inventory_file '/'"),
        ({"lab_inventory_file": "/etc"}, "lab_inventory_file '/etc'"),
        ({"lab_bridge": "br 0"}, "lab_bridge 'br 0'"),
    ],
)
def test_each_bad_name_or_path_fails_its_own_rule(overrides: dict[str, Any], start: str) -> None:
    messages = failed(**overrides)
    assert len(messages) == 1, messages
    assert messages[0].startswith(start)


REMOVE = """
- name: Remove lab nodes as molecule's destroy does
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Remove them
      ansible.builtin.include_role:
        name: trainstack.cluster.lab
        tasks_from: remove_nodes.yml
"""


@pytest.mark.parametrize("name", ["", ".", "..", "/", "ts-m-a/../..", "ts m", "$(id)"])
def test_removal_refuses_a_bad_node_name_before_any_command(tmp_path: Path, name: str) -> None:
    book = tmp_path / "remove.yml"
    book.write_text(REMOVE)
    proc = run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            "localhost,",
            str(book),
            "-e",
            f"ansible_python_interpreter={VENV_BIN / 'python'}",
            "-e",
            f'{{"lab_remove_nodes": ["ts-m-fine", {name!r}], "lab_state_dir": "{tmp_path}/state"}}'.replace(
                "'", '"'
            ),
        ],
        check=False,
    )
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "lab_remove_nodes holds [" in out and "Nothing was removed." in out
    assert "TASK [trainstack.cluster.lab : Stop and remove containers]" not in out


def test_removal_refuses_a_state_dir_it_would_empty(tmp_path: Path) -> None:
    book = tmp_path / "remove.yml"
    book.write_text(REMOVE)
    proc = run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            "localhost,",
            str(book),
            "-e",
            '{"lab_remove_nodes": ["ts-m-fine"], "lab_state_dir": "/"}',
        ],
        check=False,
    )
    assert proc.returncode != 0
    assert "lab_state_dir '/' must be an absolute path at least two levels deep" in proc.stdout + proc.stderr
    assert "TASK [trainstack.cluster.lab : Stop and remove containers]" not in proc.stdout


def _manifest_rootfs(manifest: object | None) -> tuple[object, str | None]:
    """The rootfs the lab takes from a Packer manifest, and the check's message (None: it passes)."""
    slurped = (
        {"failed": True} if manifest is None else {"content": base64.b64encode(json.dumps(manifest).encode())}
    )
    templar = role_data_templar("lab", lab_base_image="/b/local-slurm-gpu/packer-manifest.json")
    templar.available_variables = {**templar.available_variables, "__lab_base_manifest": slurped}
    block = next(t for t in yaml_tasks("base_image.yml") if t["name"].startswith("Read the rootfs path"))[
        "block"
    ]
    expression = block[1]["ansible.builtin.set_fact"]["__lab_base_manifest_rootfs"].strip()[2:-2]
    rootfs = template_value(templar, expression)
    templar.available_variables = {**templar.available_variables, "__lab_base_manifest_rootfs": rootfs}
    return rootfs, assert_task_failure(templar, block[2])


def yaml_tasks(name: str) -> list[dict]:
    return yaml.safe_load((ROLE / "tasks" / name).read_text())


def test_a_local_builds_packer_manifest_names_the_rootfs() -> None:
    older = {"custom_data": {"lab_rootfs": "/b/old.rootfs.tar"}}
    newest = {"custom_data": {"stack": "s", "lab_rootfs": "/b/local-slurm-gpu/new.rootfs.tar"}}
    assert _manifest_rootfs({"builds": [older, newest]}) == ("/b/local-slurm-gpu/new.rootfs.tar", None)


@pytest.mark.parametrize(
    ("manifest", "said"),
    [
        ({"builds": []}, "names no builds[-1].custom_data.lab_rootfs"),
        ({"builds": [{"custom_data": {"stack": "s"}}]}, "names no builds[-1].custom_data.lab_rootfs"),
        ({"last_run_uuid": "x"}, "names no builds[-1].custom_data.lab_rootfs"),
        (None, "it cannot be read"),
    ],
    ids=["no-builds", "amazon-build", "not-a-manifest", "unreadable"],
)
def test_a_manifest_without_a_lab_rootfs_is_refused(manifest: object, said: str) -> None:
    rootfs, message = _manifest_rootfs(manifest)
    assert rootfs == ""
    assert message and said in message and "make image-local" in message


@pytest.mark.parametrize(
    ("given", "chosen"),
    [
        ("/b/local-slurm-gpu/packer-manifest.json", "/b/local-slurm-gpu/new.rootfs.tar"),
        ("/b/mine.rootfs.tar", "/b/mine.rootfs.tar"),
        ("", "/var/cache/trainstack/lab/base-bookworm-k.tar"),
    ],
    ids=["packer-manifest", "tarball", "cached-base"],
)
def test_the_base_image_is_the_manifests_rootfs_a_given_tarball_or_the_cached_base(
    given: str, chosen: str
) -> None:
    """As the play runs it: the block's condition, then the choice (a regex written with a backslash here once
    matched in the condition but not in the set_fact, so the manifest itself was unpacked)."""
    templar = role_data_templar(
        "lab", lab_base_image=given, lab_cache_dir="/var/cache/trainstack/lab", lab_suite="bookworm"
    )
    tasks = yaml_tasks("base_image.yml")
    block = next(t for t in tasks if t["name"].startswith("Read the rootfs path"))
    facts = {"__lab_base_key": "k"}
    if templar.evaluate_conditional(trust_as_template(block["when"])):
        facts["__lab_base_manifest_rootfs"] = "/b/local-slurm-gpu/new.rootfs.tar"
    templar.available_variables = {**templar.available_variables, **facts}
    choose = next(t for t in tasks if t["name"] == "Choose the base image")["ansible.builtin.set_fact"][
        "__lab_base_tar"
    ]
    assert templar.template(trust_as_template(choose)).strip() == chosen


def _power_host_check(sshd: bool, shadow: dict[str, Any]) -> str | None:
    """The elastic nodes' host check (validate.yml) with or without sshd and the given read of /etc/shadow."""
    templar = role_data_templar("lab", lab_elastic_nodes=2)
    templar.available_variables = {
        **templar.available_variables,
        "__lab_power_sshd_binary": {"stat": {"exists": sshd}},
        "__lab_power_root_shadow": shadow,
    }
    block = next(
        t
        for t in yaml_tasks("validate.yml")
        if t["name"] == "Check what the power service needs from the host"
    )
    assert block["when"] == "__lab_elastic | bool"
    return assert_task_failure(templar, block["block"][2])


@pytest.mark.parametrize(
    ("sshd", "shadow", "found"),
    [
        (False, {"rc": 0, "stdout": "root:*:20000:0:99999:7:::"}, "found: False) and"),
        (True, {"rc": 2, "stdout": ""}, "(root has no entry in /etc/shadow)"),
        (True, {"rc": 0, "stdout": "root:!$y$j9T$abc:20000:0:99999:7:::"}, "root's password is locked"),
        (True, {"rc": 0, "stdout": "root:!:20000:0:99999:7:::"}, "root's password is locked"),
        (True, {"rc": 0, "stdout": "root:*:20000:0:99999:7::1:"}, "root's account expired (day 1"),
    ],
)
def test_elastic_nodes_are_refused_on_a_host_whose_sshd_would_refuse_root(
    sshd: bool, shadow: dict[str, Any], found: str
) -> None:
    message = _power_host_check(sshd, shadow)
    assert message is not None and message.startswith("lab_elastic_nodes=2 needs") and found in message
    assert "$y$" not in message  # the hash is never shown


@pytest.mark.parametrize("password", ["*", "$y$j9T$abc", ""])
def test_elastic_nodes_pass_with_sshd_and_an_unlocked_root(password: str) -> None:
    assert _power_host_check(True, {"rc": 0, "stdout": f"root:{password}:20000:0:99999:7:::"}) is None


def test_the_lab_inventory_sends_the_hosts_services_past_the_package_proxy() -> None:
    """The proxy refuses every port but its own: a mirror on the bridge or the loopback is reached directly by
    every client that reads no_proxy (Python's urllib, as the artifact role and pip do, is the strictest)."""
    templar = role_data_templar("lab", __lab_nodes=[{"name": "ts-head", "ip": "10.77.0.11", "group": "head"}])
    inventory = yaml.safe_load(render_role_template(templar, "lab", "hosts.yml.j2"))
    env = inventory["all"]["vars"]["trainstack_proxy_env"]
    assert env["http_proxy"] == env["https_proxy"] == "http://10.77.0.1:3142"
    bypass = {"no": env["no_proxy"]}
    for host in ("127.0.0.1:8675", "localhost:5000", "10.77.0.1:8671"):
        assert urllib.request.proxy_bypass_environment(host, bypass), host
    for host in ("pypi.org", "files.pythonhosted.org:443", "10.77.0.12:22"):
        assert not urllib.request.proxy_bypass_environment(host, bypass), host
