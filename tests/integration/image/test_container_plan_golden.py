"""Golden record of what playbooks/build_container.yml plans for its flavours and of the requests it refuses.

tests/data/golden/container_plans.json holds, for every flavour of the playbook's table, the layer a real
ansible-playbook run plans (container_plan_capture.py: base image, roles and variables of the layer, the roles
of its chain, its GPU components, tags, the ``layers`` list of its stack record), and the message of each
refusal. A rewrite of the planning must leave it as it is. After an intended change, record it again and
review the diff:

    .venv/bin/python -m tests.integration.image.container_plan_capture \
        > tests/data/golden/container_plans.json
"""

from __future__ import annotations

import json

import pytest

from tests.integration.image.container_plan_capture import GOLDEN, all_flavours, record

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads(GOLDEN.read_text())


@pytest.fixture(scope="module")
def actual() -> dict:
    return record()


def test_the_record_covers_every_flavour(recorded: dict) -> None:
    assert sorted(recorded["plans"]["every flavour"]) == sorted(all_flavours())


def test_every_flavour_is_planned_as_recorded(recorded: dict, actual: dict) -> None:
    for request, plan in recorded["plans"].items():
        assert sorted(actual["plans"][request]) == sorted(plan), request
        for flavour, layer in plan.items():
            assert actual["plans"][request][flavour] == layer, f"{request}: {flavour}"


def test_bad_requests_are_refused_as_recorded(recorded: dict, actual: dict) -> None:
    assert actual["refusals"] == recorded["refusals"]
