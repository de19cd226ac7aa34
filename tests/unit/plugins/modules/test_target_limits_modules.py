"""Every module that reads a cluster spec refuses what a target service would refuse, before any client.

Each bad spec below breaks one rule of module_utils/cluster/target_limits.py (a ParallelCluster validator, a
botocore shape, a service quota, botocore's regions or EC2's instance types). Each of the six modules that
take a spec (cluster_spec, pcluster_config and the four cluster modules, with O(render_only) and no client)
must fail with the spec key in its problems: a clear error, never a render and never a crash.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.amazon.aws.plugins.module_utils.modules import AnsibleAWSModule
from ansible_collections.trainstack.cluster.plugins.modules import (
    batch_cluster,
    cluster_spec,
    eks_cluster,
    hyperpod_cluster,
    pcluster_config,
    pcs_cluster,
)

from tests.unit.plugins.cluster_examples import AMI, EXAMPLE_SPECS, FOUNDATION
from tests.unit.plugins.modules.test_cluster_module_renders import arguments

pytestmark = pytest.mark.cluster

MODULES = {
    "cluster_spec": cluster_spec,
    "pcluster_config": pcluster_config,
    "batch_cluster": batch_cluster,
    "eks_cluster": eks_cluster,
    "hyperpod_cluster": hyperpod_cluster,
    "pcs_cluster": pcs_cluster,
}
# (what is changed in the p4d example, the key the refusal must name)
BAD_INPUTS = {
    "name too short for PCS": ({"name": "ab"}, "name"),
    "name ending with a hyphen (HyperPod)": ({"name": "train-"}, "name"),
    "name over 40 characters (PCS)": ({"name": "t" * 45}, "name"),
    "queue named default (ParallelCluster)": ({"queues.0.name": "default"}, "queues[0].name"),
    "queue named controller (HyperPod)": ({"queues.0.name": "controller"}, "queues[0].name"),
    "queue name of 2 characters (PCS)": ({"queues.0.name": "gp"}, "queues[0].name"),
    "max_count over HyperPod's instance count": ({"queues.0.max_count": 7000}, "queues[0].max_count"),
    "51 queues (ParallelCluster)": ({"queues": "51"}, "queues"),
    "region typo": ({"region": "us-east-11", "availability_zone": "us-east-11a"}, "region"),
    "head node type typo": ({"head_node.instance_type": "m7i.2xlarg"}, "head_node.instance_type"),
    "FSx on a reserved directory": ({"shared_storage.fsx_lustre.mount_dir": "/opt"}, "shared_storage"),
    "FSx on / (HyperPod)": ({"shared_storage.fsx_lustre.mount_dir": "/"}, "shared_storage"),
    "AMI id of 12 hex digits (ParallelCluster)": ({"image": "ami"}, "image.ami_id"),
}


def bad_spec(tmp_path: Path, changes: dict[str, Any]) -> Path:
    spec = copy.deepcopy(yaml.safe_load(EXAMPLE_SPECS["p4d"].read_text()))
    for dotted, value in changes.items():
        if dotted == "queues":
            queue = spec["queues"][0]
            spec["queues"] = [{**queue, "name": f"q{index:03d}"} for index in range(int(value))]
        elif dotted == "image":
            spec["image"] = {
                **{k: v for k, v in spec["image"].items() if k != "tags"},
                "ami_id": "ami-0123456789ab",
            }
        else:
            *path, last = dotted.split(".")
            here = spec
            for part in path:
                here = here[int(part)] if part.isdigit() else here[part]
            here[int(last) if last.isdigit() else last] = value
    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture
def run_module(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    from ansible.module_utils.testing import patch_module_args

    def run(name: str, **args: Any) -> dict[str, Any]:
        monkeypatch.setattr(
            AnsibleAWSModule, "client", lambda *_a, **_k: pytest.fail(f"{name} made a client")
        )
        capsys.readouterr()
        with patch_module_args(args), pytest.raises(SystemExit):
            MODULES[name].main()
        return json.loads(capsys.readouterr().out)

    return run


def module_args(name: str, path: Path) -> dict[str, Any]:
    if name == "cluster_spec":
        return {"path": str(path)}
    if name == "pcluster_config":
        return {"path": str(path), "foundation": FOUNDATION, "ami_id": AMI}
    return arguments(name, path)


@pytest.mark.parametrize("module", sorted(MODULES))
@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_each_module_refuses_the_bad_spec_naming_the_key(run_module, tmp_path: Path, module: str, case: str):
    changes, key = BAD_INPUTS[case]
    result = run_module(module, **module_args(module, bad_spec(tmp_path, changes)))
    assert result.get("failed"), f"{module} accepted {case}: {result}"
    assert result["msg"].startswith("cluster spec is invalid:"), result["msg"]
    assert any(f": {key}" in problem for problem in result["problems"]), result["problems"]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_the_unchanged_example_passes_the_spec_check(run_module, tmp_path: Path, module: str) -> None:
    """The bad specs differ from a spec each module takes only in what the case changes."""
    result = run_module(module, **module_args(module, bad_spec(tmp_path, {})))
    assert not result.get("msg", "").startswith("cluster spec is invalid"), result
