"""image_stage run by Ansible on localhost, as build_image.yml runs it beside the build container: a stage
snapshotted from the container's root filesystem (read from its config), the plan checked and the stages
reused before any stage is skipped, and a plan that does not fit the build refused naming the difference."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import CURRENT_STACK_ID, LOCALHOST_ARGS, VENV_BIN, run

ROLES = ("base", "nccl", "slurm", "pytorch")
SETTINGS = {"flavour": "slurm-gpu", "stack": CURRENT_STACK_ID, "pytorch_testcases": None}


def image_stage(**args: Any) -> subprocess.CompletedProcess[str]:
    """One real module run on localhost."""
    return run(
        [
            str(VENV_BIN / "ansible"),
            "all",
            *LOCALHOST_ARGS,
            "-m",
            "trainstack.cluster.image_stage",
            "-a",
            json.dumps(args),
        ],
        check=False,
        timeout=300,
    )


def result(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The module's result, as the configured callback prints it (YAML after the host's status)."""
    return yaml.safe_load(proc.stdout.split("=>", 1)[1])


@pytest.fixture
def build(tmp_path: Path) -> dict[str, Any]:
    """A container directory (config naming its root filesystem), a root filesystem, a cache and a plan."""
    container = tmp_path / "lxc" / "ts-image-build"
    rootfs = container / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc" / "stage").write_text("nccl\n")
    (container / "config").write_text(f"lxc.uts.name = ts-image-build\nlxc.rootfs.path = dir:{rootfs}\n")
    cache = tmp_path / "cache"
    stages = []
    for index, role in enumerate(ROLES, start=1):
        key = hashlib.sha256(role.encode()).hexdigest()
        stages.append({"index": index, "role": role, "key": key, "snapshot": f"{cache}/stages/{key}.tar"})
    plan = {
        "cache_dir": str(cache),
        "flavour": "slurm-gpu",
        "keep": 8,
        "variables": SETTINGS,
        "stages": stages,
        "resume": {"after": 0, "snapshot": ""},
    }
    plan_path = tmp_path / "stages.json"
    plan_path.write_text(json.dumps(plan))
    common = {"plan": str(plan_path), "container": "ts-image-build", "container_dir": str(container)}
    return {"plan": plan, "plan_path": plan_path, "container": container, "common": common, "cache": cache}


def test_a_stage_is_snapshotted_from_the_containers_root_filesystem(build: dict[str, Any]) -> None:
    proc = image_stage(**build["common"], state="captured", index=2)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = result(proc)
    stage = build["plan"]["stages"][1]
    assert out["changed"] is True and out["snapshot"] == stage["snapshot"]
    assert out["record"]["key"] == stage["key"] and out["record"]["role"] == "nccl"
    tar = Path(stage["snapshot"])
    assert out["record"]["sha256"] == hashlib.sha256(tar.read_bytes()).hexdigest()
    assert json.loads(tar.with_suffix(".json").read_text()) == out["record"]


def test_the_build_resumes_after_the_snapshot_the_container_was_made_from(build: dict[str, Any]) -> None:
    plan = build["plan"]
    plan["resume"] = {"after": 3, "snapshot": plan["stages"][2]["snapshot"]}
    build["plan_path"].write_text(json.dumps(plan))
    (build["container"] / "trainstack-rootfs-from").write_text(plan["stages"][2]["snapshot"] + "\n")
    proc = image_stage(**build["common"], state="resumed", applied=list(ROLES), settings=SETTINGS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = result(proc)
    assert (out["after"], out["reused"], out["run"]) == (3, ["base", "nccl", "slurm"], ["pytorch"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"settings": {**SETTINGS, "pytorch_testcases": "pytorch/ddp"}},
            "pytorch_testcases='pytorch/ddp' (planned None)",
        ),
        (
            {"applied": ["base", "slurm", "pytorch"]},
            "are not the roles this build applies (base, slurm, pytorch)",
        ),
        ({"state": "captured", "index": 5}, "image_stage index=5 is out of range 1..4"),
    ],
)
def test_a_plan_that_does_not_fit_the_build_fails_it(
    build: dict[str, Any], change: dict[str, Any], message: str
) -> None:
    (build["container"] / "trainstack-rootfs-from").write_text("base\n")
    args = {**build["common"], "state": "resumed", "applied": list(ROLES), "settings": SETTINGS, **change}
    proc = image_stage(**args)
    assert proc.returncode != 0
    assert message in result(proc)["msg"]
    assert not build["cache"].exists()
