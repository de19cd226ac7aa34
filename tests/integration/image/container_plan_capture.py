"""What playbooks/build_container.yml plans for each container flavour, as a real ansible-playbook run
plans it.

The playbook's first plays check the inputs and plan every layer into the fact ``container_plan`` (base
image, roles and variables of each layer, the roles of its chain, its GPU components, its tags, the ``layers``
list of its record); the layer playbook and the publishing play only read it. This module runs the playbook
itself on the controller with a stand-in ``buildah`` on PATH that answers "this layer is already built", so
that nothing is built or pushed, and a callback that keeps the last ``container_plan`` a task set and the
message of the task that failed. The answer is comparable across rewrites of the planning: a playbook that
plans the same layers gives the same record.

Each layer's key is a digest over the repository's files (plugins/, the roles), the stack and the layer
playbook, so any edit elsewhere moves it: the record replaces each key by ``<key of FLAVOUR>`` and keeps the
image names and tags that hold it in the same form. ``--raw-keys`` keeps the digests, computed with the file
list replaced by a fixed one (an extra variable shadows the playbook's find: a file under a layer's roles, one
under plugins/, one elsewhere), a wheelhouse of one wheel and GPU architectures set, to compare two
checkouts' keys directly.

Record again after an intended change of the plan, and review the diff:

    .venv/bin/python -m tests.integration.image.container_plan_capture \
        > tests/data/golden/container_plans.json
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "playbooks" / "build_container.yml"
GOLDEN = REPO / "tests" / "data" / "golden" / "container_plans.json"

# Answers `inspect --format` with an image id (every layer counts as built) and a plain `inspect` with the
# annotation the publishing play reads; anything else is a mistake of the harness.
FAKE_BUILDAH = """#!/bin/sh
case "$*" in
  "inspect --type image --format "*) echo sha256:0000; exit 0;;
  "inspect --type image "*)
    echo '{"ImageAnnotations": {"org.trainstack.image.json": "{\\"roles\\": []}"}}'; exit 0;;
esac
echo "stand-in buildah: unexpected $*" >&2
exit 2
"""

# With --raw-keys: files that some layers' keys cover and others do not (a role of base, of pytorch, of the
# CUDA line, a support role's, the plugins', and two that no key covers).
KEY_PROBE_FILES = (
    "roles/base/tasks/main.yml",
    "roles/pytorch/tasks/main.yml",
    "roles/nccl_tests/tasks/main.yml",
    "roles/image_manifest/tasks/main.yml",
    "plugins/filter/container.py",
    "packer/lxc/lxc-trainstack-debian",
    "docs/containers.md",
    "roles/slurm/tasks/main.yml",
)

CALLBACK = '''
import json, os
from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    """Keeps the last container_plan a task set and the first failure, written out at the end."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "plan_capture"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.plan = None
        self.failure = None

    def _keep(self, result):
        facts = result.get("ansible_facts") or {}
        if "container_plan" in facts:
            self.plan = json.loads(json.dumps(facts["container_plan"], default=str))

    def v2_runner_item_on_ok(self, result):
        self._keep(result._result)

    def v2_runner_on_ok(self, result):
        self._keep(result._result)

    def _failed(self, result):
        if self.failure is None:
            self.failure = {"task": str(result._task.get_name()), "msg": str(result._result.get("msg", ""))}

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._failed(result)

    def v2_runner_item_on_failed(self, result):
        self._failed(result)

    def v2_playbook_on_stats(self, stats):
        with open(os.environ["PLAN_CAPTURE_OUT"], "w") as out:
            json.dump({"plan": self.plan, "failure": self.failure}, out)
'''


def ansible_env(**extra: str) -> dict[str, str]:
    """The collection's environment (bench/support/lab.py), imported late so that ``-m`` runs stay light."""
    from bench.support.lab import ansible_env as env

    return env(**extra)


def ansible_playbook() -> str:
    from bench.support.lab import VENV_BIN

    return str(VENV_BIN / "ansible-playbook")


def run_playbook(extra_vars: dict[str, Any], *, raw_keys: bool = False) -> dict[str, Any]:
    """``{"plan": container_plan or None, "failure": {"task", "msg"} or None, "rc": exit status}``."""
    with tempfile.TemporaryDirectory(prefix="container-plan.") as tmp:
        work = Path(tmp)
        (work / "bin").mkdir()
        (work / "bin" / "buildah").write_text(FAKE_BUILDAH)
        (work / "bin" / "buildah").chmod(0o755)
        (work / "callback").mkdir()
        (work / "callback" / "plan_capture.py").write_text(CALLBACK)
        env = ansible_env(
            BUILDAH_ISOLATION="chroot",
            PLAN_CAPTURE_OUT=str(work / "out.json"),
            ANSIBLE_CALLBACK_PLUGINS=str(work / "callback"),
            ANSIBLE_CALLBACKS_ENABLED="plan_capture",
        )
        env["PATH"] = f"{work / 'bin'}:{env['PATH']}"
        variables = {"container_build_dir": str(work / "build"), **extra_vars}
        if raw_keys:
            (work / "wheels").mkdir()
            (work / "wheels" / "torch-0-py3-none-any.whl").write_text("wheel")
            variables["__container_files"] = {
                "files": [
                    {"path": str(REPO / path), "checksum": f"sum-{index}"}
                    for index, path in enumerate(KEY_PROBE_FILES)
                ]
            }
            variables.update(pytorch_wheelhouse=str(work / "wheels"), container_cuda_archs=["sm_90"])
        proc = subprocess.run(
            [
                ansible_playbook(),
                "-i",
                "localhost,",
                "-e",
                f"ansible_python_interpreter={sys.executable}",
                "-e",
                json.dumps(variables),
                str(PLAYBOOK),
            ],
            env=env,
            cwd=REPO,
            # A standard input of its own: a buildah run earlier in the same pytest process leaves the shared
            # one non-blocking, and ansible-playbook refuses to start on that.
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        out = work / "out.json"
        if not out.exists():
            # stderr too: a playbook that stops before its first task (a collection it cannot load, a
            # syntax error) says why only there.
            tail = proc.stdout[-4000:] + "\n--- stderr ---\n" + proc.stderr[-4000:]
            raise AssertionError(f"ansible-playbook wrote no record ({proc.returncode}):\n{tail}")
        return {**json.loads(out.read_text()), "rc": proc.returncode}


def normalised(plan: dict[str, Any]) -> dict[str, Any]:
    """The plan with each layer's key (and its 12-character prefix in names and tags) as ``<key of F>``."""
    text = json.dumps(plan, sort_keys=True)
    for flavour, layer in plan.items():
        key = layer["key"]
        text = text.replace(key, f"<key of {flavour}>").replace(key[:12], f"<key of {flavour}>")
    # The stand-in's image id and the stack id are the run's, not the plan's.
    stack = re.escape(next(iter(plan.values()))["tags"][1])
    text = re.sub(stack, "<stack>", text)
    return json.loads(text)


def all_flavours() -> list[str]:
    """Every flavour of the playbook's table, read from the playbook as it is now."""
    import yaml

    return list(yaml.safe_load(PLAYBOOK.read_text())[0]["vars"]["container_image_flavours"])


# Requests whose plan is recorded: every flavour, and one test case flavour alone (its ancestors come with it,
# the flavours beside them do not). Each plan entry depends only on the table, so these cover every flavour.
def requests() -> dict[str, dict[str, Any]]:
    return {
        "every flavour": {"container_flavours": all_flavours()},
        "one case flavour": {"container_flavours": ["cuda-pytorch-fsdp"]},
    }


def table() -> dict[str, Any]:
    import yaml

    return yaml.safe_load(PLAYBOOK.read_text())[0]["vars"]["container_image_flavours"]


# Requests refused before anything is planned, and the message of each refusal.
def refusals() -> dict[str, dict[str, Any]]:
    flavours = table()
    return {
        "unknown flavour": {"container_flavours": ["base", "jax"]},
        "flavours as a string": {"container_flavours": "base"},
        "no flavour": {"container_flavours": []},
        "unknown parent": {
            "container_image_flavours": {"a": {"parent": "b", "image_flavour": "base-gpu"}},
            "container_flavours": ["a"],
        },
        "parent listed after its child": {
            "container_image_flavours": {
                "a": {"parent": "b", "image_flavour": "slurm-gpu"},
                "b": {"parent": "", "image_flavour": "base-gpu"},
            },
            "container_flavours": ["a"],
        },
        "unknown flavour key": {
            "container_image_flavours": {**flavours, "extra": {"parent": "base", "roles": [], "packages": []}}
        },
        "flavour without roles": {"container_image_flavours": {**flavours, "extra": {"parent": "base"}}},
        "flavour named twice": {"container_flavours": ["base", "pytorch", "base"]},
        "test case without a lock for the target": {
            "container_image_flavours": {
                **flavours,
                "cuda-deepspeed-zero3": {**flavours["cuda-pytorch-ddp"], "testcases": ["deepspeed/zero3"]},
            },
            "container_flavours": ["cuda-deepspeed-zero3"],
        },
    }


def record() -> dict[str, Any]:
    out: dict[str, Any] = {"plans": {}, "refusals": {}}
    for name, variables in requests().items():
        result = run_playbook(variables)
        if result["rc"] != 0 or result["plan"] is None:
            raise AssertionError(f"{name}: the playbook failed: {result['failure']}")
        out["plans"][name] = normalised(result["plan"])
    for name, variables in refusals().items():
        result = run_playbook(variables)
        if result["rc"] == 0 or result["failure"] is None:
            raise AssertionError(f"{name}: the playbook did not refuse the request")
        out["refusals"][name] = result["failure"]["msg"]
    return out


if __name__ == "__main__":
    if "--raw-keys" in sys.argv:
        result = run_playbook({"container_flavours": all_flavours()}, raw_keys=True)
        print(json.dumps({f: layer["key"] for f, layer in (result["plan"] or {}).items()}, indent=1))
    else:
        print(json.dumps(record(), indent=1, sort_keys=True))
