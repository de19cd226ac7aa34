"""An OCI registry for the lab: Debian's docker-registry (distribution) on the host's lab bridge address.

Why the host and not the head node: buildah runs on the host, so pushing there copies no layer across the
lab's network and needs no package in the head node, which the lab recreates; the nodes still reach it on the
bridge (10.77.0.1), which is how enroot on a node will pull from it. Plain HTTP: the registry is on the
private lab bridge only (build_container.yml then asks for container_registry_allow_http).

    python scripts/lab_registry.py up --dir DIR [--bind 10.77.0.1 --port 8673]
    python scripts/lab_registry.py down --dir DIR

The container tests and bench/container_build.py import it as `scripts.lab_registry`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

BINARY = "/usr/bin/docker-registry"
DEFAULT_BIND = "10.77.0.1"
DEFAULT_PORT = 8673


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _config(directory: Path, bind: str, port: int) -> Path:
    """The registry's configuration: storage under ``directory``, deletes allowed (tests clean up)."""
    path = directory / "config.yml"
    path.write_text(
        json.dumps(
            {
                "version": 0.1,
                "log": {"level": "info"},
                "storage": {
                    "filesystem": {"rootdirectory": str(directory / "data")},
                    "delete": {"enabled": True},
                },
                "http": {"addr": f"{bind}:{port}"},
            },
            indent=2,
        )
    )
    return path


def _wait(url: str) -> bool:
    for _attempt in range(100):
        try:
            with urllib.request.urlopen(f"{url}/v2/", timeout=1) as reply:
                if reply.status == 200:
                    return True
        except OSError:
            time.sleep(0.1)
    return False


def start(directory: Path, bind: str = DEFAULT_BIND, port: int = DEFAULT_PORT) -> str:
    """Start (or keep) a detached registry serving ``directory``; its pid is kept in ``directory/.pid``."""
    if shutil.which(BINARY) is None:
        raise RuntimeError(f"{BINARY} is missing: the docker-registry package (make host-deps)")
    directory.mkdir(parents=True, exist_ok=True)
    url = f"http://{bind}:{port}"
    pidfile = directory / ".pid"
    if pidfile.exists() and _alive(int(pidfile.read_text())):
        return url
    log = open(directory / "registry.log", "ab")  # noqa: SIM115 - handed to the child process
    proc = subprocess.Popen(
        [BINARY, "serve", str(_config(directory, bind, port))],
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    pidfile.write_text(str(proc.pid))
    if not _wait(url):
        stop(directory)
        raise RuntimeError(f"registry on {bind}:{port} did not answer (see {directory}/registry.log)")
    return url


def stop(directory: Path) -> None:
    """Stop the registry this helper started for ``directory`` (by its recorded pid only)."""
    pidfile = directory / ".pid"
    if not pidfile.exists():
        return
    pid = int(pidfile.read_text())
    if _alive(pid):
        os.kill(pid, signal.SIGTERM)
        for _attempt in range(50):
            if not _alive(pid):
                break
            time.sleep(0.1)
    pidfile.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--bind", default=DEFAULT_BIND)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    if args.action == "down":
        stop(args.dir)
    else:
        print(json.dumps({"url": start(args.dir, args.bind, args.port)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
