"""Package installs on lab nodes survive a proxy that drops connections.

A fresh machine's first test run once failed because the lab's package proxy answered `503 Connection closed`
to dozens of fetches. The proxy now retries its own downloads within limits; apt (2.6) retries only failed
connections, not a fetch cut mid-file, so installs are retried by the task or installer that runs them. This
test puts a deliberately faulty relay between a node and the proxy and converges through it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import VENV_BIN, lab_ssh, run

from .fault_proxy import FaultProxy

pytestmark = [pytest.mark.lab, pytest.mark.own_nodes]

NODE, ADDRESS = "ts-m-faults", "10.77.0.192"
BOOK = [str(VENV_BIN / "ansible-playbook"), "tests/integration/foundation/proxy_faults.yml"]
PACKAGES = ["openmpi-bin", "libfabric1", "rdma-core", "libopenmpi3"]
NAIVE_DOWNLOAD = ["apt-get", "-o", "Acquire::Retries=0", "install", "-y", "--reinstall", "--download-only"]


@pytest.fixture
def faulty_proxy(lab_network: None) -> Iterator[FaultProxy]:
    proxy = FaultProxy(listen=("10.77.0.1", 3150), upstream=("10.77.0.1", 3142))
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture
def clean_node(lab_network: None) -> Iterator[None]:
    run([*BOOK, "-e", "faults_node_state=absent"])
    try:
        yield
    finally:
        run([*BOOK, "-e", "faults_node_state=absent"])


def test_a_converge_succeeds_through_a_proxy_that_drops_connections(faulty_proxy, clean_node, tmp_path):
    proc = run(
        [
            *BOOK,
            "-e",
            f"faults_inventory={tmp_path}/hosts.yml",
            "-e",
            "faults_proxy_url=http://10.77.0.1:3150",
        ],
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    counts = dict(faulty_proxy.counts)
    # The faults happened: connections were dropped unanswered and cut mid-response, and the converge went on.
    # Each of the two steps (index refresh, install) meets a cut and a drop before its first clean relay.
    assert counts.get("drop", 0) >= 2 and counts.get("cut", 0) >= 2, counts

    # The same fetches without retries fail through this proxy: the faults above are ones that break a client.
    # One apt run may ride a single relayed keep-alive connection; three in a row cannot all (fixed rotation).
    naive = []
    for _ in range(3):
        lab_ssh(ADDRESS, "apt-get", "clean")
        naive.append(lab_ssh(ADDRESS, *NAIVE_DOWNLOAD, *PACKAGES))
    failed = [proc for proc in naive if proc.returncode != 0]
    assert failed, [proc.stdout[-500:] for proc in naive]
