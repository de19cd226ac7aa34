# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Filters over what a host that powers Slurm nodes needs (module_utils/slurm/power_host).

Why a filter: the lab refuses elastic nodes its host cannot power before it creates anything; the rule for
the account's shadow entry lives in Python with a unit test per case instead of in the role's Jinja.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.trainstack.cluster.plugins.module_utils.slurm.power_host import (
    shadow_login_problem as _shadow_login_problem,
)


def shadow_login_problem(entry: Any, account: str) -> str:
    """Why an sshd without PAM would refuse every login to the account ('' when it accepts one)."""
    return _shadow_login_problem(None if entry is None else str(entry), str(account))


class FilterModule:
    """The power host filters."""

    def filters(self) -> dict[str, Any]:
        """Filter names to functions."""
        return {"shadow_login_problem": shadow_login_problem}
