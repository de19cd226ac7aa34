"""Where a HyperPod node's munge key comes from (playbooks/hyperpod_node.yml), and where it never goes.

The key must not be written to the shared file system (FSx: readable by root on every client, outliving the
cluster). The node reads it from the SSM SecureString that hyperpod_cluster writes, or in the lab from a
node-local file. The first test reads the playbook as data: no task or variable of it puts a munge key under
the shared directory (removing one is allowed). The second runs the playbook's own key-reading tasks, taken
out of it unchanged, on this machine against a moto server with the AWS CLI, as a node runs them.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import LOCALHOST_ARGS, REPO, VENV_BIN, MotoServer, moto_aws_env, run, start_moto

pytestmark = pytest.mark.cluster

PLAYBOOK = REPO / "playbooks" / "hyperpod_node.yml"
SHARED = ("__hyperpod.state_dir", "__hyperpod.shared_dir", "hyperpod_shared_dir", "__hyperpod_nodes_dir")
MESSAGES = ("ansible.builtin.assert", "ansible.builtin.debug", "ansible.builtin.fail")
READ_TASKS = (
    "Read the munge key from SSM",
    "Check that the munge key was read from SSM",
    "Read the munge key from this node's file",
)


def _tasks(node: Any) -> Iterator[dict[str, Any]]:
    """Every task of the playbook, blocks opened."""
    for task in node or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


def _plays() -> list[dict[str, Any]]:
    return [play for play in yaml.safe_load(PLAYBOOK.read_text()) if "hosts" in play]


def _under_shared(text: str) -> bool:
    return any(name in text for name in SHARED)


def test_no_task_or_variable_puts_a_munge_key_on_the_shared_directory() -> None:
    for play in _plays():
        for name, value in (play.get("vars") or {}).items():
            text = json.dumps(value)
            assert not ("munge" in f"{name} {text}".lower() and _under_shared(text)), name
        for task in _tasks(play.get("tasks")):
            # What a task does (its module's arguments and variables), not what its messages say.
            text = json.dumps({k: v for k, v in task.items() if k not in ("name", *MESSAGES)})
            if "munge" not in text.lower() or not _under_shared(text):
                continue
            # The one task allowed to name a key there removes what an earlier release left.
            assert task.get("ansible.builtin.file", {}).get("state") == "absent", task["name"]


def _munge_key_expression() -> str:
    """What the playbook hands the munge role as munge_key."""
    for play in _plays():
        for task in _tasks(play.get("tasks")):
            role = task.get("ansible.builtin.include_role") or {}
            if role.get("name") == "trainstack.cluster.munge":
                return task["vars"]["munge_key"]
    raise AssertionError("hyperpod_node.yml includes no munge role")


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = start_moto()
    yield server
    server.stop()


@pytest.mark.moto
@pytest.mark.skipif(shutil.which("aws") is None, reason="the AWS CLI is not installed")
def test_the_node_reads_the_key_from_ssm_and_never_prints_it(moto: MotoServer, tmp_path: Path) -> None:
    key = base64.b64encode(os.urandom(1024)).decode("ascii")
    name = "/trainstack/hyperpod/train-1/munge-key"
    moto.client("ssm", "eu-west-1").put_parameter(Name=name, Value=key, Type="SecureString")
    tasks = [t for play in _plays() for t in _tasks(play.get("tasks")) if t.get("name") in READ_TASKS]
    assert [t["name"] for t in tasks] == list(READ_TASKS)
    out = tmp_path / "installed.key"
    play = [
        {
            "hosts": "all",
            "gather_facts": False,
            "vars": {
                "hyperpod_munge_key_parameter": name,
                "hyperpod_aws_region": "eu-west-1",
                "hyperpod_munge_key_file": "",
            },
            "tasks": [
                *tasks,
                # Where the munge role would install it; here a file, to compare.
                {"ansible.builtin.copy": {"content": _munge_key_expression(), "dest": str(out)}},
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    proc = run(
        [str(VENV_BIN / "ansible-playbook"), *LOCALHOST_ARGS, "-v", str(tmp_path / "play.yml")],
        env=moto_aws_env(moto.url, PATH=f"{VENV_BIN}:{os.environ['PATH']}"),
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert out.read_text() == key
    assert key not in proc.stdout + proc.stderr
    assert "Read the munge key from this node's file" in proc.stdout  # skipped: the plan names a parameter


@pytest.mark.moto
@pytest.mark.skipif(shutil.which("aws") is None, reason="the AWS CLI is not installed")
def test_a_key_the_node_may_not_read_fails_saying_why(moto: MotoServer, tmp_path: Path) -> None:
    """no_log hides a failed task's message: the check after the read says why (the error holds no key)."""
    tasks = [t for play in _plays() for t in _tasks(play.get("tasks")) if t.get("name") in READ_TASKS]
    plan = {
        "hyperpod_munge_key_parameter": "/trainstack/hyperpod/gone/munge-key",
        "hyperpod_aws_region": "eu-west-1",
        "hyperpod_munge_key_file": "",
    }
    play = [{"hosts": "all", "gather_facts": False, "vars": plan, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    proc = run(
        [str(VENV_BIN / "ansible-playbook"), *LOCALHOST_ARGS, str(tmp_path / "play.yml")],
        env=moto_aws_env(moto.url, PATH=f"{VENV_BIN}:{os.environ['PATH']}"),
        check=False,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "Cannot read the munge key from SSM parameter /trainstack/hyperpod/gone/munge-key" in proc.stdout
    assert "ParameterNotFound" in proc.stdout, proc.stdout[-2000:]
