"""A lab launch runs in the environment the lab's image baked for its test case (roles/pytorch,
pytorch_testcases), not in a virtualenv built on the shared filesystem: the plan says ``venv: baked <path>``,
the path is the one image.json lists with the launch's key, the job script starts that interpreter, and the
summary names the torch it ran on. Needs a lab made from an image built with this collection
(`make image-local`, then the lab)."""

from __future__ import annotations

import json
import os
import re

import pytest

from tests.support import on_lab_node

from .conftest import SHARED, launch, on_both_nodes, results_dir

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def test_a_lab_launch_uses_the_environment_the_image_baked(lab_ready: None) -> None:
    image = json.loads(on_lab_node("cat /etc/trainstack/image.json"))
    envs = {env["case"]: env for env in image.get("testcase_envs", [])}
    assert "pytorch/ddp" in envs, (
        "the lab's image baked no environment for pytorch/ddp (image.json testcase_envs: "
        f"{image.get('testcase_envs')}, skipped: {image.get('testcase_envs_skipped')}); rebuild it with "
        "`make image-local` and make the lab from it"
    )
    env = envs["pytorch/ddp"]
    assert (env["target"], env["lock_name"]) == ("lab", "requirements.lock")
    name = f"it-baked-{os.getpid()}"
    proc = launch(*on_both_nodes("pytorch/ddp", name))
    assert f"venv: baked {env['path']}" in proc.stdout, proc.stdout[-3000:]
    shown = rf"python\s+baked {re.escape(env['path'])} \(requirements\.lock, target lab\)"
    assert re.search(shown, proc.stdout), proc.stdout[-3000:]
    out = results_dir(proc.stdout)
    script = (SHARED / "trainstack" / "runs" / out.name / "job.sbatch").read_text()
    assert f"{env['path']}/bin/python" in script
    assert not (SHARED / "trainstack" / "venvs" / f"pytorch-ddp-{env['key']}").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["torch_version"].split("+")[0] == env["torch"]
    assert summary["torch_accepted"] is None
