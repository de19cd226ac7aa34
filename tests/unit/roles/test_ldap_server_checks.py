"""ldap_server refuses, before anything is installed, an organization, host name or TLS directory that would
change the certificate's subject or names, or the paths its root shell writes. Runs the role's own checks
(os_vars.yml, then checks.yml) with ansible-playbook on localhost; nothing is installed either way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import LOCALHOST_ARGS, VENV_BIN, run

GOOD = {
    "ldap_server_admin_password": "a-long-enough-password",
    "ldap_server_organization": "trainstack",
    "ldap_server_hostname": "ts-m-mu-head",
}


def checks(tmp_path: Path, **overrides: str) -> tuple[int, str]:
    """The role's settings and checks only, with ``overrides`` over GOOD."""
    play = [
        {
            "hosts": "all",
            "gather_facts": True,
            "vars": {**GOOD, **overrides},
            "tasks": [
                {
                    "name": "Only the checks",
                    "ansible.builtin.include_role": {
                        "name": "trainstack.cluster.ldap_server",
                        "tasks_from": name,
                    },
                }
                for name in ("os_vars", "checks")
            ],
        }
    ]
    path = tmp_path / "play.yml"
    path.write_text(json.dumps(play))
    proc = run([str(VENV_BIN / "ansible-playbook"), *LOCALHOST_ARGS, str(path)], check=False, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def test_good_settings_pass_the_checks(tmp_path: Path) -> None:
    rc, out = checks(tmp_path)
    assert rc == 0, out[-3000:]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ldap_server_organization", "Acme/CN=evil.example"),
        ("ldap_server_organization", "Acme, Inc+x"),
        ("ldap_server_hostname", "head,evil.example"),
        ("ldap_server_hostname", "head name"),
        ("ldap_server_tls_dir", "/etc/ldap/../ssh"),
        ("ldap_server_tls_dir", "relative/tls"),
    ],
)
def test_values_that_would_change_the_certificate_or_the_shell_are_refused(
    tmp_path: Path, key: str, value: str
) -> None:
    rc, out = checks(tmp_path, **{key: value})
    assert rc != 0
    assert f"(got '{value}')" in out and "Nothing was changed." in out, out[-3000:]
