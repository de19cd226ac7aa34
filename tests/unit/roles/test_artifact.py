"""The artifact role's report of what it fetched: the unverified list reads registered results as Ansible
2.19 gives them (a fetched item has no `skipped` key, a skipped one has no `verified` key)."""

from __future__ import annotations

import yaml

from tests.support import REPO, role_data_templar, template_value

TASKS = yaml.safe_load((REPO / "roles" / "artifact" / "tasks" / "main.yml").read_text())


def _unverified_loop() -> str:
    wanted = "Say which artifacts were installed without"
    task = next(t for t in TASKS if t.get("name", "").startswith(wanted))
    return task["loop"].strip().removeprefix("{{").removesuffix("}}")


def test_only_fetched_unverified_artifacts_are_reported():
    results = [
        {"item": {"name": "checked"}, "verified": True, "source": "https://example.org/a"},
        {"item": {"name": "unchecked"}, "verified": False, "source": "https://example.org/b"},
        {"item": {"name": "not-for-this-host"}, "skipped": True, "skip_reason": "Conditional was False"},
    ]
    templar = role_data_templar("artifact", artifact_results={"results": results})
    reported = template_value(templar, _unverified_loop())
    assert [entry["item"]["name"] for entry in reported] == ["unchecked"]
