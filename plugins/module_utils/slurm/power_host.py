# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""What a host that powers Slurm nodes through an sshd without PAM needs of the account that logs in.

OpenSSH built with PAM but run with ``UsePAM no`` checks the account itself: it refuses every login, key
logins included, to an account whose shadow password field starts with ``!`` (locked) or whose account
expiry date has passed; an account with no shadow entry gives it nothing to check, and is refused here too.
The lab's power service is such an sshd, so the lab checks the entry before it creates a node; the rule is
kept here so that a unit test can state each case instead of a Jinja expression in a role.
"""

from __future__ import annotations

import time

LOCKED_PREFIX = "!"
SECONDS_PER_DAY = 86400


def _today(now: float | None) -> int:
    """Days since 1970-01-01, the unit of the shadow file's date fields."""
    return int((time.time() if now is None else now) // SECONDS_PER_DAY)


def shadow_login_problem(entry: str | None, account: str, now: float | None = None) -> str:
    """Why an sshd without PAM would refuse every login to the account ('' when it accepts one).

    ``entry`` is the account's line as `getent shadow <account>` prints it, or ``None``/empty when the
    account has no entry. The message never repeats the password field, which may hold a hash.
    """
    line = (entry or "").strip()
    if not line:
        return f"{account} has no entry in /etc/shadow"
    fields = line.split(":")
    if fields[0] != account:
        return f"the shadow entry read is not {account}'s"
    password = fields[1] if len(fields) > 1 else ""
    if password.startswith(LOCKED_PREFIX):
        return f"{account}'s password is locked (its /etc/shadow password field starts with '!'; '*' is fine)"
    expiry = fields[7] if len(fields) > 7 else ""
    if expiry.strip().isdigit() and int(expiry) <= _today(now):
        return f"{account}'s account expired (day {int(expiry)} of /etc/shadow's expiry field)"
    return ""
