"""moto, the AWS stand-in: a real moto HTTP server in a child process, on a free loopback port.

Tests and benchmarks that talk to AWS talk to this server through the same clients and Ansible modules a user
runs; only the endpoint differs.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.support.lab import VENV_BIN

MOTO_KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@dataclass
class MotoServer:
    """A real moto HTTP server in a child process; tests and benchmarks talk to it like to AWS."""

    url: str
    process: subprocess.Popen

    def client(self, service: str, region: str) -> Any:
        import boto3
        from botocore.config import Config

        # Long read timeout, no retries: a busy shared machine must not turn a slow answer into a repeat.
        config = Config(read_timeout=900, retries={"max_attempts": 1, "mode": "standard"})
        return boto3.client(
            service,
            region_name=region,
            endpoint_url=self.url,
            config=config,
            aws_access_key_id=MOTO_KEYS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=MOTO_KEYS["AWS_SECRET_ACCESS_KEY"],
        )

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_moto(
    log: Path | None = None, env: dict[str, str] | None = None, server: Path | None = None
) -> MotoServer:
    """Start moto_server on a free loopback port and wait until it answers; ``env`` adds to its environment
    (e.g. MOTO_IAM_LOAD_MANAGED_POLICIES=true, without which moto knows no AWS managed policy); ``server`` is
    a script that adds to moto what it lacks and runs its server with moto_server's arguments."""
    port = free_port()
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - lives as long as the server
    command = [str(VENV_BIN / "python"), str(server)] if server else [str(VENV_BIN / "moto_server")]
    process = subprocess.Popen(
        [*command, "-H", "127.0.0.1", "-p", str(port)],
        stdout=out,
        stderr=out,
        env={**os.environ, **(env or {})},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/moto-api/", timeout=1).read()
            return MotoServer(url, process)
        except OSError:
            if process.poll() is not None:
                raise RuntimeError(f"moto_server exited with {process.returncode}") from None
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("moto_server did not answer within 30 s")
