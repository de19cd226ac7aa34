"""The local LXC lab as the lab tests reach it: SSH to its nodes, what a test changed on a node and how to
put it back, the lock shared with the own_nodes tests, and polling for lab state that takes time.

The lab's key and SSH options are product code, shared with the benchmarks (bench/support/lab.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from bench.support.lab import LAB_KEY, LAB_SSH

from .collection import REPO

__all__ = [
    "EFA_EXPORTER_UNITS",
    "LAB_KEY",
    "LAB_SSH",
    "OWN_NODES_LOCK",
    "LabNodeState",
    "lab_node_state",
    "lab_ssh",
    "link_exists",
    "on_lab_node",
    "own_nodes_done",
    "restore_lab_node",
    "wait_for",
]

# Held by the process that runs the own_nodes tests beside the lab's own tests (make integration-own-nodes):
# the lab's teardown takes it first, so that it never removes the bridge under their nodes.
OWN_NODES_LOCK = REPO / ".cache" / "own-nodes.lock"


def link_exists(name: str) -> bool:
    """Whether the host has a network link of that name (the lab's bridge, for one)."""
    shown = subprocess.run(["ip", "link", "show", "dev", name], capture_output=True, check=False)
    return shown.returncode == 0


@contextlib.contextmanager
def own_nodes_done() -> Iterator[None]:
    """Wait until a process running the own_nodes tests beside this one has ended (at once when none runs)."""
    OWN_NODES_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with OWN_NODES_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def lab_ssh(address: str, *command: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """Run a command on a lab node over SSH and return the finished process (text output, never raises).
    ssh gets a standard input of its own (as `ssh -n`): it makes the one it is given non-blocking while it
    runs (one killed at its timeout leaves it so), and ansible-* programs refuse to start on such a stdin."""
    return subprocess.run(
        [*LAB_SSH, f"root@{address}", *command],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def on_lab_node(command: str, address: str = "10.77.0.11", *, check: bool = True) -> str:
    """Run a shell command on a lab node (the head node by default) over SSH with the lab key, as users do."""
    proc = lab_ssh(address, command)
    if check and proc.returncode != 0:
        raise AssertionError(f"{command!r} on {address} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout.strip()


@dataclass
class LabNodeState:
    """What a test that configures a lab node in place found there first: which of the paths it may create
    existed, and which of the packages it may install were installed."""

    paths: set[str]
    packages: set[str]


def lab_node_state(address: str, paths: list[str], packages: tuple[str, ...]) -> LabNodeState:
    """Record which of ``paths`` exist and which of ``packages`` are installed on a lab node."""
    quoted = " ".join(shlex.quote(path) for path in paths)
    existing = on_lab_node(f"for p in {quoted}; do [ -e $p ] && echo $p; done; true", address).split()
    query = f"dpkg-query -W -f='${{Package}} ${{db:Status-Abbrev}}\\n' {' '.join(packages)} 2>/dev/null; true"
    installed = {
        line.split()[0] for line in on_lab_node(query, address).splitlines() if line.split()[1:2] == ["ii"]
    }
    return LabNodeState(set(existing), installed)


# The EFA textfile exporter's units, which the monitoring role of a node bootstrap installs.
EFA_EXPORTER_UNITS = ("trainstack-efa-exporter.service", "trainstack-efa-exporter.timer")


def restore_lab_node(
    address: str, before: LabNodeState, created: list[str], parents: list[str], packages: tuple[str, ...]
) -> None:
    """Remove what a node bootstrap added to a lab node (the ``created`` paths, the ``parents`` left empty,
    the ``packages``) that ``before`` did not have, so the lab's other tests find the node as it was."""
    new_paths = [path for path in created if path not in before.paths]
    if any(path.endswith("/trainstack-efa-exporter.timer") for path in new_paths):
        on_lab_node(f"systemctl disable --now {' '.join(EFA_EXPORTER_UNITS)}", address, check=False)
    if new_paths:
        on_lab_node("rm -rf " + " ".join(shlex.quote(path) for path in new_paths), address, check=False)
    new_parents = [path for path in parents if path not in before.paths]
    if new_parents:
        on_lab_node("rmdir --ignore-fail-on-non-empty " + " ".join(new_parents), address, check=False)
    new_packages = sorted(set(packages) - before.packages)
    if new_packages:
        on_lab_node(
            "DEBIAN_FRONTEND=noninteractive apt-get purge -y -q " + " ".join(new_packages) + " >/dev/null",
            address,
            check=False,
        )
    # A timer run the stop cut short leaves the unit failed, and a failed unit leaves the node "degraded".
    on_lab_node(
        f"systemctl daemon-reload; systemctl reset-failed {' '.join(EFA_EXPORTER_UNITS)} 2>/dev/null; true",
        address,
        check=False,
    )


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll every 2 s until predicate() holds; fail naming what was awaited (lab state takes time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(2)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
