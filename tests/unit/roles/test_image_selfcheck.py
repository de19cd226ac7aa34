"""Per-host identity and secrets of images (roles/image_selfcheck), without building one; munge's key rules
are in test_munge.py.

The first-boot script runs for real (its `address` step, against a file in a temporary directory); the units
and drop-ins are the role's templates rendered with Ansible's templar; the self-check's verdicts are the
role's own expressions evaluated over stand-in `stat` results. tests/integration/image/test_image_identity.py
boots two lab nodes from a real image.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.template import trust_as_template

from tests.support import REPO, render_role_template, role_data_templar

ROLE = REPO / "roles" / "image_selfcheck"
SCRIPT = ROLE / "files" / "trainstack-host-identity"


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


# ------------------------------------------------------------------------------------------ first boot
def run_address(target: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRAINSTACK_CLUSTER_ADDRESS_FILE": str(target)}
    return subprocess.run([str(SCRIPT), "address"], env=env, capture_output=True, text=True, check=False)


def test_first_boot_records_this_hosts_address_once(tmp_path):
    target = tmp_path / "trainstack" / "cluster-address.env"
    first = run_address(target)
    assert first.returncode == 0, first.stderr
    (line,) = [row for row in target.read_text().splitlines() if not row.startswith("#")]
    address = re.fullmatch(r"TRAINSTACK_CLUSTER_ADDRESS=([0-9.]+)", line).group(1)
    host_addresses = subprocess.run(
        ["hostname", "-I"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert address in host_addresses
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    # A configuration run may have replaced it: a later boot keeps what is there.
    target.write_text("TRAINSTACK_CLUSTER_ADDRESS=10.1.2.3\n")
    assert run_address(target).returncode == 0
    assert target.read_text() == "TRAINSTACK_CLUSTER_ADDRESS=10.1.2.3\n"
    assert [p.name for p in target.parent.iterdir()] == ["cluster-address.env"], "no temporary file left"


def test_first_boot_script_refuses_an_unknown_step():
    proc = subprocess.run([str(SCRIPT), "munge"], capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "usage" in proc.stderr


def test_host_keys_are_made_before_sshd_only_where_missing():
    unit = render_role_template(role_data_templar(ROLE.name), ROLE.name, "trainstack-host-keys.service.j2")
    assert "Before=ssh.service ssh.socket sshd.service" in unit
    assert "ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key" in unit
    assert "ExecStart=/usr/local/sbin/trainstack-host-identity keys" in unit
    assert "WantedBy=multi-user.target" in unit


def test_cluster_address_unit_writes_the_file_the_dcgm_exporter_reads():
    unit = render_role_template(
        role_data_templar(ROLE.name), ROLE.name, "trainstack-cluster-address.service.j2"
    )
    dcgm = _yaml(REPO / "roles/dcgm/defaults/main.yml")["dcgm_exporter_address_file"]
    assert f"ConditionPathExists=!{dcgm}" in unit
    assert f"Environment=TRAINSTACK_CLUSTER_ADDRESS_FILE={dcgm}" in unit
    assert dcgm in _yaml(ROLE / "defaults" / "main.yml")["image_selfcheck_host_secret_paths"]


# ------------------------------------------------------------------------------------------ generalize
def test_generalize_removes_the_munge_key_and_holds_munge_back():
    secrets = _yaml(ROLE / "defaults" / "main.yml")["image_selfcheck_cluster_secrets"]
    assert {"path": "/etc/munge/munge.key", "service": "munge"} in secrets
    dropin = render_role_template(
        role_data_templar(ROLE.name, item=secrets[0]), ROLE.name, "cluster-secret.conf.j2"
    )
    assert "[Unit]\nConditionPathExists=/etc/munge/munge.key" in dropin


def test_generalize_removes_random_seed_and_empties_machine_id():
    host = _yaml(ROLE / "defaults" / "main.yml")["image_selfcheck_host_secret_paths"]
    assert "/var/lib/systemd/random-seed" in host
    # munged's PRNG seed: written by a munged that ran during the build (a build resumed from a stage snapshot
    # boots with the build's munge key), and written again as munged stops, so munge is stopped first.
    assert "/var/lib/munge/munged.seed" in host
    names = [t["name"] for t in _yaml(ROLE / "tasks" / "generalize.yml")]
    assert names.index("Stop the services that wait for a cluster secret") < names.index(
        "Remove per-host secrets and cluster secrets a package generated during the build"
    )
    tasks = _yaml(ROLE / "tasks" / "generalize.yml")
    (machine_id,) = [t for t in tasks if "machine id" in t["name"]]
    assert machine_id["ansible.builtin.copy"]["content"] == "" and machine_id["ansible.builtin.copy"][
        "dest"
    ] == ("/etc/machine-id")
    removed = next(t for t in tasks if t["name"].startswith("Remove per-host secrets"))
    assert (
        "image_selfcheck_cluster_secrets" in removed["loop"]
        and "image_selfcheck_host_secret_paths" in removed["loop"]
    )
    enabled = next(t for t in tasks if t["name"] == "Enable them for the image's boots")
    assert enabled["ansible.builtin.systemd_service"]["enabled"] is True


def test_generalize_finds_the_services_whose_unit_the_image_holds():
    results = [
        {
            "item": [{"path": "/etc/munge/munge.key", "service": "munge"}, "/lib/systemd/system"],
            "stat": {"exists": True},
        },
        {
            "item": [{"path": "/etc/munge/munge.key", "service": "munge"}, "/etc/systemd/system"],
            "stat": {"exists": False},
        },
        {
            "item": [{"path": "/etc/x.key", "service": "other"}, "/lib/systemd/system"],
            "stat": {"exists": False},
        },
    ]
    templ = role_data_templar("image_selfcheck", __image_selfcheck_secret_units={"results": results})
    assert templ.template(trust_as_template("{{ __image_selfcheck_secret_services }}")) == ["munge"]


# ------------------------------------------------------------------------------------------ self-check
def _leftover_checks(secrets_present: list[str], machine_id: dict) -> dict[str, dict]:
    """The role's 'Evaluate the checks' expressions over stand-in find/stat results."""
    task = next(t for t in _yaml(ROLE / "tasks" / "main.yml") if t["name"] == "Evaluate the checks")
    paths = _yaml(ROLE / "defaults" / "main.yml")["image_selfcheck_host_secret_paths"]
    paths += [s["path"] for s in _yaml(ROLE / "defaults" / "main.yml")["image_selfcheck_cluster_secrets"]]
    templ = role_data_templar(
        "image_selfcheck",
        __image_selfcheck_keys={"matched": 0, "files": []},
        __image_selfcheck_hist={"matched": 0, "files": []},
        __image_selfcheck_cloud={"results": []},
        __image_selfcheck_secrets={
            "results": [{"item": p, "stat": {"exists": p in secrets_present}} for p in paths]
        },
        __image_selfcheck_machine_id={"stat": machine_id},
        **task["vars"],
    )
    checks = templ.template(trust_as_template("{{ __leftover_checks }}"))
    return {c["check"]: c for c in checks}


def test_selfcheck_passes_a_generalised_image():
    checks = _leftover_checks([], {"exists": True, "size": 0})
    assert checks["no-host-secrets"]["status"] == "pass"
    assert checks["machine-id-empty"]["status"] == "pass"


def test_selfcheck_fails_an_image_with_a_munge_key_or_seed():
    checks = _leftover_checks(
        ["/etc/munge/munge.key", "/var/lib/systemd/random-seed"], {"exists": True, "size": 0}
    )
    assert checks["no-host-secrets"]["status"] == "fail"
    assert checks["no-host-secrets"]["detail"] == "/var/lib/systemd/random-seed, /etc/munge/munge.key"


@pytest.mark.parametrize(
    ("stat", "detail"),
    [({"exists": True, "size": 33}, "holds an id"), ({"exists": False}, "is missing")],
)
def test_selfcheck_wants_an_empty_machine_id_file(stat, detail):
    check = _leftover_checks([], stat)["machine-id-empty"]
    assert check["status"] == "fail" and detail in check["detail"]
