"""The rule for the account a host's sshd without PAM logs in as (module_utils/slurm/power_host)."""

from __future__ import annotations

import pytest
from ansible_collections.trainstack.cluster.plugins.module_utils.slurm.power_host import (
    SECONDS_PER_DAY,
    shadow_login_problem,
)

NOW = 20000 * SECONDS_PER_DAY + 3600  # an hour into day 20000


@pytest.mark.parametrize(
    "entry",
    [
        "root:*:20000:0:99999:7:::",
        "root:$y$j9T$abc:20000:0:99999:7:::",
        "root::20000:0:99999:7:::",
        "root:*:20000:0:99999:7::20001:",
        "root:*:20000:0:99999:7::  :",
        "root:*\n",
        "root:*",
    ],
)
def test_an_account_sshd_accepts_has_no_problem(entry: str) -> None:
    assert shadow_login_problem(entry, "root", now=NOW) == ""


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        (None, "root has no entry in /etc/shadow"),
        ("", "root has no entry in /etc/shadow"),
        ("  \n", "root has no entry in /etc/shadow"),
        ("root:!$y$j9T$abc:20000:0:99999:7:::", "root's password is locked"),
        ("root:!:20000:0:99999:7:::", "root's password is locked"),
        ("root:!*:20000:0:99999:7:::", "root's password is locked"),
        ("root:*:20000:0:99999:7::20000:", "root's account expired (day 20000"),
        ("root:*:20000:0:99999:7::1:", "root's account expired (day 1 "),
        ("daemon:*:20000:0:99999:7:::", "the shadow entry read is not root's"),
    ],
)
def test_a_refused_account_is_named_with_its_rule(entry: str | None, problem: str) -> None:
    message = shadow_login_problem(entry, "root", now=NOW)
    assert message.startswith(problem), message
    assert "$y$" not in message  # a hash is never repeated


def test_the_expiry_is_read_against_todays_date_by_default() -> None:
    assert shadow_login_problem("root:*:1:0:99999:7::2:", "root") != ""
    assert shadow_login_problem("root:*:1:0:99999:7::999999:", "root") == ""
