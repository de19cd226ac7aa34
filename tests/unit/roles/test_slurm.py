"""The cluster playbook checks every host first; the Slurm roles then skip their own copy of that check.

Checking twice is harmless but slow and noisy (every assert is printed twice per host); checking never would
be a real fault. So: each role's main imports validate.yml guarded by a fact, and the last task of
validate.yml sets exactly that fact.
"""

from __future__ import annotations

import re

import pytest
import yaml

from tests.support import REPO


@pytest.mark.parametrize("role", ["slurm", "slurm_accounting"])
def test_main_skips_the_check_the_playbook_already_ran(role: str) -> None:
    tasks = REPO / "roles" / role / "tasks"
    first = yaml.safe_load((tasks / "main.yml").read_text())[0]
    assert first.get("ansible.builtin.import_tasks") == "validate.yml", "main must start with the check"
    guard = re.fullmatch(r"not \((\w+) \| default\(false\)\)", first.get("when", ""))
    assert guard, f"{role} main.yml runs validate.yml unguarded: {first.get('when')!r}"
    last = yaml.safe_load((tasks / "validate.yml").read_text())[-1]
    assert last.get("ansible.builtin.set_fact", {}).get(guard.group(1)) is True
    assert "when" not in last, "the fact must be set whenever the check passed"


def test_the_cluster_playbook_checks_every_host_before_any_change() -> None:
    plays = yaml.safe_load((REPO / "playbooks" / "slurm_cluster.yml").read_text())
    first = plays[0]
    assert first.get("any_errors_fatal") is True
    assert [t["ansible.builtin.include_role"]["tasks_from"] for t in first["tasks"]] == ["validate.yml"] * 2
