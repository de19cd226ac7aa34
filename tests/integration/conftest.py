"""Integration fixtures: the lab is brought up once per session; its teardown test runs last."""

from __future__ import annotations

import pytest

from tests.support import link_exists, playbook

# Fixtures that use host-wide state: the lab's containers, bridge and proxy, or LXC image builds.
HOST_FIXTURES = frozenset(
    {"lab_required", "lab", "lab_network", "slurm_lab", "local_image", "image_stage_builds"}
)


def _uses_the_host(item: pytest.Item) -> bool:
    if any(item.get_closest_marker(name) for name in ("lab", "lab_teardown")):
        return True
    return bool(HOST_FIXTURES & set(getattr(item, "fixturenames", ())))


def _order(item: pytest.Item) -> tuple[bool, bool]:
    """Teardown last; just before it, the tests that boot the local image (make test builds it meanwhile)."""
    return (
        item.get_closest_marker("lab_teardown") is not None,
        "local_image" in getattr(item, "fixturenames", ()),
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked lab_teardown take the lab down, so they run after every other test; those that use the
    local image run just before them, so that a build beside this process (make test) has time to finish.

    Every test that touches the lab or builds with LXC is marked `host`: those run in one process, in this
    order (`make integration-host`), while the self-contained tests (moto, rendered manifests, the local
    launcher) can run beside them in another (`make integration-isolated`): the lab is one shared machine,
    the rest is not. Of the `host` tests, those marked `own_nodes` by hand start nodes of their own and never
    touch the lab's: `make integration-own-nodes` runs them beside the rest. (The `-m` selection sees the
    marker: this hook runs before pytest's own.)
    """
    items.sort(key=_order)
    for item in items:
        if _uses_the_host(item):
            item.add_marker(pytest.mark.host)
        _check_own_nodes(item)


# Fixtures that reach the lab's own nodes: a test that uses one cannot run beside the lab's tests.
LAB_NODE_FIXTURES = frozenset({"lab", "slurm_lab"})


def _check_own_nodes(item: pytest.Item) -> None:
    """Refuse an own_nodes test that uses the lab's nodes: beside the lab's tests it would race with them."""
    if item.get_closest_marker("own_nodes") is None:
        return
    shared = sorted(LAB_NODE_FIXTURES & set(getattr(item, "fixturenames", ())))
    if shared:
        raise pytest.UsageError(
            f"{item.nodeid}: marked own_nodes but uses {', '.join(shared)} (the lab's nodes); "
            "use lab_network for the bridge and proxy, or drop the marker"
        )


@pytest.fixture(scope="session")
def lab(lab_required: None) -> None:
    """A running 3-node lab (head + 2 compute); lab-up is idempotent, so a lab already up is reused."""
    playbook("lab_up", "-e", "lab_node_count=3")


@pytest.fixture(scope="session")
def lab_network(lab_required: None) -> None:
    """The lab's bridge, package proxy and base image, for tests that start nodes of their own.

    When the lab is up they are used as they are: lab-up is not run again, because these tests may run in a
    process beside the lab's own tests, which stop and restart the lab's nodes (a lab-up meanwhile would start
    them again). Otherwise the lab is brought up.
    """
    if not link_exists("tslab0"):
        playbook("lab_up", "-e", "lab_node_count=3")


@pytest.fixture(scope="session")
def slurm_lab(lab: None) -> None:
    """The lab with Slurm and accounting, installed by the collection's playbook (idempotent, so reused)."""
    playbook("slurm_cluster", "-i", "inventories/local")
