"""Fixtures for the ec2_cluster inventory: moto server, a small mixed fleet, an ansible-inventory runner."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from bench.support import moto_fleet
from bench.support.moto_fleet import KEYS, plain
from tests.support import MotoServer, start_moto


@dataclass
class Fleet:
    """What the fixture created, so tests can state exact expectations (ids and addresses are moto's)."""

    instances: dict[str, list[dict]] = field(default_factory=dict)
    hyperpod_arn: str = ""

    def dns(self, key: str) -> list[str]:
        return sorted(i["PrivateDnsName"] for i in self.instances[key])

    def one(self, key: str) -> dict:
        return self.instances[key][0]

    def ids(self, key: str) -> list[str]:
        return sorted(i["InstanceId"] for i in self.instances[key])


@dataclass
class Runner:
    """Writes a `<name>.ec2_cluster.yml` and runs ansible-inventory on it, as a user would."""

    directory: Path
    endpoint: str

    def write(self, body: str, name: str = "test") -> Path:
        path = self.directory / f"{name}.ec2_cluster.yml"
        path.write_text(body.replace("@ENDPOINT@", self.endpoint))
        return path

    def run(self, path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        command = [str(moto_fleet.VENV_BIN / "ansible-inventory"), "-i", str(path), *args]
        environment = moto_fleet.clean_aws_env(KEYS if env is None else env)
        # A standard input of its own: ansible-inventory refuses to start on a shared one that an earlier
        # child left non-blocking.
        return subprocess.run(
            command,
            env=environment,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    def listing(self, body: str, *args: str) -> dict[str, Any]:
        done = self.run(self.write(body), "--list", *args)
        assert done.returncode == 0, done.stderr
        return plain(json.loads(done.stdout))


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    server = start_moto()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def fleet(moto_server: MotoServer) -> Fleet:
    """Two regions: ParallelCluster llm-a, PCS pcs_abc123 and tagged fleet-x in us-east-1; ParallelCluster
    llm-b and HyperPod hp-1 in us-west-2; plus an untagged instance and a stopped cluster node (both must be
    left out)."""
    made = Fleet()
    east = moto_server.client("ec2", "us-east-1")
    ami = moto_fleet.image_id(east)
    for key, value in moto_fleet.parallelcluster(
        east, ami, "llm-a", {"train": ("p5-od", "p5.48xlarge", 2), "cpu": ("c5", "c5.xlarge", 1)}, login=1
    ).items():
        made.instances[f"llm-a/{key}"] = value
    for key, value in moto_fleet.pcs_cluster(
        east, ami, "pcs_abc123", {"pcs_login": ("c5.large", 1), "pcs_gpu": ("p4d.24xlarge", 2)}
    ).items():
        made.instances[f"pcs/{key}"] = value
    tagged = {"training-cluster": "fleet-x", "training-partition": "batch"}
    made.instances["fleet-x/head"] = moto_fleet.run(
        east, ami, 1, "m5.large", {**tagged, "training-role": "controller"}
    )
    made.instances["fleet-x/compute"] = moto_fleet.run(east, ami, 2, "g5.xlarge", tagged)
    made.instances["untagged"] = moto_fleet.run(east, ami, 1, "t3.micro", {"Name": "bastion"})
    stopped = moto_fleet.run(east, ami, 1, "c5.large", {"parallelcluster:cluster-name": "llm-a"})
    east.stop_instances(InstanceIds=[stopped[0]["InstanceId"]])
    made.instances["stopped"] = stopped
    west = moto_server.client("ec2", "us-west-2")
    for key, value in moto_fleet.parallelcluster(
        west, moto_fleet.image_id(west), "llm-b", {"train": ("g5", "g5.48xlarge", 2)}
    ).items():
        made.instances[f"llm-b/{key}"] = value
    made.hyperpod_arn = moto_fleet.hyperpod_cluster(
        moto_server.client("sagemaker", "us-west-2"),
        "hp-1",
        {
            "controller-machine": ("ml.c5.xlarge", 1),
            "login-group": ("ml.c5.xlarge", 1),
            "worker-group-1": ("ml.p5.48xlarge", 2),
        },
    )
    return made


@pytest.fixture
def runner(tmp_path: Path, moto_server: MotoServer, fleet: Fleet) -> Runner:
    return Runner(tmp_path, moto_server.url)


@pytest.fixture
def make_runner(tmp_path: Path) -> Callable[[str], Runner]:
    """A runner for another moto server than the session one (the pagination test has its own)."""
    return lambda endpoint: Runner(tmp_path, endpoint)


@pytest.fixture
def errors(runner: Runner) -> Callable[..., str]:
    """Run a config that must fail; return stderr so the test can check the message names the culprit."""

    def run(body: str, env: dict[str, str] | None = None, *args: str) -> str:
        done = runner.run(runner.write(body), "--list", *args, env=env)
        assert done.returncode != 0, done.stdout[:2000]
        return " ".join(done.stderr.split())

    return run


@dataclass
class StandIn:
    """A local endpoint that misbehaves on purpose, and how many connections or requests reached it."""

    url: str
    hits: int = 0


@pytest.fixture
def silent_endpoint() -> Iterator[StandIn]:
    """A TCP socket that accepts every connection and never sends a byte: an AWS endpoint that hangs."""
    listener = socket.create_server(("127.0.0.1", 0))
    stand_in = StandIn(f"http://127.0.0.1:{listener.getsockname()[1]}")
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                connection = listener.accept()[0]
            except OSError:
                return
            held.append(connection)
            stand_in.hits += 1

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield stand_in
    listener.close()
    for connection in held:
        connection.close()


@pytest.fixture
def unavailable_endpoint() -> Iterator[StandIn]:
    """An HTTP endpoint that answers every request 503 Service Unavailable, which botocore retries."""
    stand_in = StandIn("")

    class Unavailable(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            stand_in.hits += 1
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b"<Response><Errors><Error><Code>ServiceUnavailable</Code>"
            body += b"<Message>stand-in is down</Message></Error></Errors></Response>"
            self.send_response(503)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            """Quiet: pytest shows the test's own output."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Unavailable)
    stand_in.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield stand_in
    server.shutdown()
    server.server_close()
