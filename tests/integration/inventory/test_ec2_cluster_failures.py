"""The ec2_cluster inventory never hangs and never lets a playbook succeed silently.

Stand-ins are real local endpoints: a TCP socket that accepts and never answers, and an HTTP server that
answers every request 503. The playbook test runs ansible-playbook with the repository's ansible.cfg and no
inventory overrides in the environment, as a user would.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from bench.support import moto_fleet

ONE_REGION = """
plugin: trainstack.cluster.ec2_cluster
regions: [us-east-1]
endpoint_url: @ENDPOINT@
cluster_kinds: [parallelcluster]
"""


def timed_failure(runner, body: str) -> tuple[float, str]:
    """Run ansible-inventory on a config that must fail; return its wall time and its one-line stderr."""
    started = time.monotonic()
    done = runner.run(runner.write(body), "--list")
    elapsed = time.monotonic() - started
    assert done.returncode != 0, done.stdout[:2000]
    return elapsed, " ".join(done.stderr.split())


def test_endpoint_that_never_answers_fails_within_a_minute_by_default(make_runner, silent_endpoint):
    """Default options only (three kinds, default timeouts and attempts): one connection, one timeout."""
    body = "plugin: trainstack.cluster.ec2_cluster\nregions: [us-east-1]\nendpoint_url: @ENDPOINT@\n"
    elapsed, message = timed_failure(make_runner(silent_endpoint.url), body)
    print(f"silent endpoint, default options: failed after {elapsed:.1f} s")
    assert f"no answer from {silent_endpoint.url}" in message
    assert "within read_timeout=30s" in message
    assert 25 <= elapsed < 60
    assert silent_endpoint.hits == 1


def test_timed_out_call_is_not_retried(make_runner, silent_endpoint):
    """max_attempts 3 still means one wait: the documented rule for timeouts, not botocore's default."""
    runner = make_runner(silent_endpoint.url)
    elapsed, message = timed_failure(runner, ONE_REGION + "read_timeout: 2\nmax_attempts: 3\n")
    assert f"describe_instances in us-east-1: no answer from {silent_endpoint.url}" in message
    assert "within read_timeout=2s" in message
    assert elapsed < 20
    assert silent_endpoint.hits == 1


@pytest.mark.parametrize("attempts", [1, 3])
def test_max_attempts_is_the_number_of_requests(make_runner, unavailable_endpoint, attempts):
    runner = make_runner(unavailable_endpoint.url)
    message = timed_failure(runner, ONE_REGION + f"max_attempts: {attempts}\n")[1]
    assert "describe_instances in us-east-1: ServiceUnavailable: stand-in is down" in message
    assert unavailable_endpoint.hits == attempts


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("read_timeout: 0", "read_timeout: must be 1 or more, got 0"),
        ("max_attempts: 0", "max_attempts: must be 1 or more, got 0"),
        ("connect_timeout: -5", "connect_timeout: must be 1 or more, got -5"),
    ],
)
def test_bad_patience_is_named_before_any_call(make_runner, silent_endpoint, option, expected):
    message = timed_failure(make_runner(silent_endpoint.url), f"{ONE_REGION}{option}\n")[1]
    assert expected in message
    assert silent_endpoint.hits == 0


PLAY = """
- name: Reach every node
  hosts: all
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
"""


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("page_size: 3", "page_size: must be between 5 and 1000, got 3"),
        ("endpoint_url: http://127.0.0.1:9", "cannot reach http://127.0.0.1:9"),
    ],
)
def test_playbook_fails_with_the_plugin_message(tmp_path: Path, option: str, expected: str):
    """With ansible.cfg as shipped, a broken inventory stops the playbook instead of matching no host."""
    source = tmp_path / "broken.ec2_cluster.yml"
    source.write_text(f"plugin: trainstack.cluster.ec2_cluster\nregions: [us-east-1]\n{option}\n")
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAY)
    env = moto_fleet.clean_aws_env(moto_fleet.KEYS)
    for name in [name for name in env if name.startswith("ANSIBLE_INVENTORY_")]:
        del env[name]
    done = subprocess.run(
        [str(moto_fleet.VENV_BIN / "ansible-playbook"), "-i", str(source), str(playbook)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    output = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0, output[-2000:]
    assert f"trainstack.cluster.ec2_cluster ({source}): " in output
    assert expected in output
    assert "TASK [Ping]" not in output
