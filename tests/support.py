"""Shared test helpers: where the repository, its venv and the lab live; how to run the collection."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = REPO / ".venv" / "bin"
LAB_KEY = Path("/var/lib/trainstack/lab/ssh/id_ed25519")


def ansible_env(**extra: str) -> dict[str, str]:
    """Environment in which ansible-* commands resolve trainstack.cluster from this checkout."""
    env = dict(os.environ)
    env.update(
        PATH=f"{VENV_BIN}:{env.get('PATH', '')}",
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO / ".cache" / "collections"),
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_NOCOLOR="1",
    )
    env.update(extra)
    return env


def run(
    cmd: list[str], *, check: bool = True, timeout: int = 900, **kw: object
) -> subprocess.CompletedProcess:
    """Run a command from the repository root with the Ansible environment, capturing text output."""
    kw.setdefault("env", ansible_env())
    kw.setdefault("cwd", REPO)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, **kw)
    if check and proc.returncode != 0:
        tail = f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{tail}")
    return proc


def playbook(name: str, *args: str, check: bool = True, **kw: object) -> subprocess.CompletedProcess:
    """Run one of the collection's playbooks by its FQCN."""
    return run([str(VENV_BIN / "ansible-playbook"), f"trainstack.cluster.{name}", *args], check=check, **kw)


def init_ansible_plugins() -> None:
    """Point Ansible's plugin loader at this checkout's collection (only the first call in a process counts).

    Unit tests that render role variables use Ansible's templar, whose collection loader is set up once per
    process: every unit-test directory that uses it calls this from its conftest, before its modules load.
    (The test cases' tests run in a process of their own: torch.compile cannot share one with Ansible.)
    """
    from ansible.plugins.loader import init_plugin_loader
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder

    if getattr(_AnsibleCollectionFinder, "_trainstack_initialised", False):
        return
    init_plugin_loader([str(REPO / ".cache" / "collections")])
    _AnsibleCollectionFinder._trainstack_initialised = True


# How tests and benchmarks reach lab nodes: root over SSH with the lab key; node host keys are made per boot.
LAB_SSH = [
    "ssh",
    "-i",
    str(LAB_KEY),
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "ConnectTimeout=10",
    "-o",
    "LogLevel=ERROR",
]


def lab_ssh(address: str, *command: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """Run a command on a lab node over SSH and return the finished process (text output, never raises)."""
    return subprocess.run(
        [*LAB_SSH, f"root@{address}", *command], capture_output=True, text=True, timeout=timeout, check=False
    )


def on_lab_node(command: str, address: str = "10.77.0.11", *, check: bool = True) -> str:
    """Run a shell command on a lab node (the head node by default) over SSH with the lab key, as users do."""
    proc = lab_ssh(address, command)
    if check and proc.returncode != 0:
        raise AssertionError(f"{command!r} on {address} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout.strip()


def published_sha256(deb: Path) -> str | None:
    """The sha256 Debian's signed package index publishes for this .deb (apt-cache show), if any."""
    import urllib.parse

    name, version, _ = urllib.parse.unquote(deb.name).rsplit("_", 2)
    out = subprocess.run(
        ["apt-cache", "show", "--no-all-versions", f"{name}={version}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return next((line.split()[1] for line in out.splitlines() if line.startswith("SHA256: ")), None)


def real_debian_debs(scratch: Path) -> list[tuple[Path, str | None]]:
    """Two real Debian packages with their published sha256: the download tests' real files.

    Taken from apt's cache when two there match their index entry, else fetched into ``scratch`` with
    `apt-get download` (Debian mirrors are reachable).
    """
    import hashlib

    found = []
    for deb in sorted(Path("/var/cache/apt/archives").glob("*.deb"), key=lambda p: p.stat().st_size)[:40]:
        digest = published_sha256(deb)
        if digest and hashlib.sha256(deb.read_bytes()).hexdigest() == digest:
            found.append((deb, digest))
        if len(found) == 2:
            return found
    subprocess.run(["apt-get", "download", "hello", "sl"], cwd=scratch, check=True, capture_output=True)
    return [(deb, published_sha256(deb)) for deb in sorted(scratch.glob("*.deb"))]


@contextlib.contextmanager
def serve_directory(root: Path) -> Iterator[tuple[str, list[str]]]:
    """Serve ``root`` over HTTP on loopback (a stand-in download host); yields (base_url, requested paths)."""
    import functools
    import http.server
    import threading

    requests: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            requests.append(self.path)

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(root))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
