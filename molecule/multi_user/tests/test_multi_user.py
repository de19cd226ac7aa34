"""Verifier for the multi_user scenario: people from one list resolve alike on every node, log in with the
directory's SSH keys only, run and are accounted as themselves under their QOS, and lose all of it when the
list marks them absent (the last tests re-run the multi_user playbook with alice absent)."""

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import testinfra

HEAD = "ts-m-mu-head"
HEAD_ADDRESS = "10.77.0.180"
NODES = [HEAD, "ts-m-mu-c1", "ts-m-mu-c2"]
BASE = "dc=cluster,dc=internal"
ALICE = "alice:*:6001:5000:alice:/home/alice:/bin/bash"
EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))


@pytest.fixture
def head(host):
    if host.backend.get_hostname() != HEAD:
        pytest.skip("runs once, against the head node")
    return host


def _wait_for(predicate, timeout: float = 90, step: float = 2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


def _ssh(user: str, command: str, key: str | None = None) -> subprocess.CompletedProcess:
    """Log in to the head node as a person, the way they would: with their key, nothing else."""
    options = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    options += ["-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=20", "-F", "/dev/null"]
    if key:
        options += ["-i", str(EPHEMERAL / key)]
    return subprocess.run(
        ["ssh", *options, f"{user}@{HEAD_ADDRESS}", command],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_alice_resolves_alike_on_every_node(host):
    assert host.check_output("getent passwd alice") == ALICE
    assert host.check_output("id -Gn alice") == "research"


def test_secret_files_are_private(host):
    conf = host.file("/etc/sssd/sssd.conf")
    assert (conf.user, conf.group, conf.mode) == ("root", "root", 0o600)
    assert host.file("/etc/munge/munge.key").mode == 0o400
    if host.backend.get_hostname() == HEAD:
        assert (host.file("/etc/ldap/tls/server.key").user, host.file("/etc/ldap/tls/server.key").mode) == (
            "openldap",
            0o400,
        )
        assert (host.file("/etc/ldap/tls/ca.key").user, host.file("/etc/ldap/tls/ca.key").mode) == (
            "root",
            0o400,
        )
        assert host.file("/etc/slurm/slurmdbd.conf").mode == 0o600


def test_directory_answers_over_starttls_with_its_ca_only(host):
    starttls = (
        f"openssl s_client -starttls ldap -connect {HEAD}:389 -verify_hostname {HEAD} -verify_return_error"
    )
    trusted = host.run(f"{starttls} -CAfile /etc/sssd/ldap-ca.crt < /dev/null")
    assert trusted.rc == 0 and "Verify return code: 0 (ok)" in trusted.stdout, trusted.stdout[-2000:]
    other = host.run(f"{starttls} -no-CAfile -no-CApath -no-CAstore < /dev/null")
    assert other.rc != 0, "a CA other than the directory's must not be trusted"


def test_directory_holds_alice_with_her_key(head):
    out = head.check_output(
        f"LDAPTLS_CACERT=/etc/ldap/tls/ca.crt ldapsearch -x -ZZ -LLL -o ldif-wrap=no -H ldap://{HEAD}"
        f" -b ou=people,{BASE} uid=alice uidNumber sshPublicKey"
    )
    assert "uidNumber: 6001" in out
    assert (EPHEMERAL / "alice.pub").read_text().split()[1] in out


def test_alice_logs_in_with_her_key_and_gets_a_private_home(head):
    login = _ssh("alice", "id -un; stat -c '%a %U' $HOME", key="alice")
    assert login.returncode == 0, login.stderr
    lines = login.stdout.splitlines()
    assert "alice" in lines and "700 alice" in lines, login.stdout


def test_passwords_are_not_offered(head):
    refused = _ssh("alice", "true")
    assert refused.returncode != 0
    assert "Permission denied (publickey)." in refused.stderr


def test_bob_cannot_read_alices_home(head):
    bob = _ssh("bob", "id -un; ls /home/alice", key="bob")
    assert "bob" in bob.stdout.splitlines(), bob.stderr
    assert "Permission denied" in bob.stderr


def test_alice_job_runs_as_alice_and_is_accounted_to_her(head):
    where = _ssh("alice", "srun -N1 -D /tmp sh -c 'echo $(id -un) $(hostname)'", key="alice")
    assert where.returncode == 0, where.stderr
    user, node = where.stdout.split()
    assert user == "alice" and node.startswith("ts-m-mu-c")
    submit = _ssh("alice", "sbatch --parsable --wait -N1 -D /tmp -o /dev/null --wrap 'id -un'", key="alice")
    assert submit.returncode == 0, submit.stderr
    job = submit.stdout.strip()
    assert re.fullmatch(r"\d+", job)
    row = f"sacct --noheader --parsable2 -X -j {job} --format=User,Account,QOS,State,NNodes"
    assert _wait_for(lambda: head.check_output(row) == "alice|research|onenode|COMPLETED|1"), (
        head.check_output(row)
    )


def test_qos_refuses_alice_a_two_node_job(head):
    submit = _ssh("alice", "sbatch --parsable -N2 -D /tmp -o /dev/null --wrap hostname", key="alice")
    assert submit.returncode == 0, submit.stderr
    job = submit.stdout.strip()
    (EPHEMERAL / "pending-job").write_text(job)
    reason = f"squeue --noheader -j {job} -o '%T %r'"
    assert _wait_for(lambda: head.check_output(reason) == "PENDING QOSMaxNodePerJobLimit"), head.check_output(
        reason
    )


def test_accounting_has_her_association_and_fair_share(head):
    rows = head.check_output(
        "sacctmgr --noheader --parsable2 show assoc where cluster=molecule format=Account,User,Fairshare,QOS"
    ).splitlines()
    assert "research|alice|1|onenode" in rows
    assert "research||10|normal" in rows
    assert "AccountingStorageEnforce = associations,limits,qos" in head.check_output("scontrol show config")


def test_marking_alice_absent_removes_her(head):
    users = [
        {"name": "alice", "state": "absent"},
        {
            "name": "bob",
            "uid": 6002,
            "gid": 5001,
            "groups": ["students"],
            "account": "students",
            "ssh_key": (EPHEMERAL / "bob.pub").read_text().strip(),
        },
    ]
    run = subprocess.run(
        [
            "ansible-playbook",
            "-i",
            str(EPHEMERAL / "inventory"),
            "trainstack.cluster.multi_user",
            "-e",
            json.dumps({"cluster_users_list": users}),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-4000:]
    job = (EPHEMERAL / "pending-job").read_text().strip()
    assert head.check_output(f"sacct --noheader --parsable2 -X -j {job} --format=State").startswith(
        "CANCELLED"
    )
    assert head.check_output("sacctmgr --noheader --parsable2 show assoc where user=alice format=User") == ""
    gone = _ssh("alice", "true", key="alice")
    assert gone.returncode != 0 and "Permission denied" in gone.stderr
    # Every node, from here: testinfra runs each host's tests together (a per-host test could run first).
    inventory = os.environ["MOLECULE_INVENTORY_FILE"]
    for name in NODES:
        node = testinfra.get_host(f"ansible://{name}?ansible_inventory={inventory}")
        assert node.run("getent passwd alice").rc == 2, name
        assert node.check_output("getent passwd bob").startswith("bob:*:6002:5001:"), name
