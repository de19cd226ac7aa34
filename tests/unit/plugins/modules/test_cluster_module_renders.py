"""Golden of what the four cluster modules render: render_only of every example spec, byte for byte.

batch_cluster, eks_cluster, hyperpod_cluster and pcs_cluster each run in process with O(render_only=true) on
every spec under inventories/aws/{batch,eks,hyperpod,clusters}, with the same foundation, AMI and launch
templates each time, and no AWS client may be asked for. What a run returns (the requests, the parameters
file, what is not rendered, the warnings, or the refusal of a spec the service cannot take) is kept in
fixtures/cluster_module_renders.json, recorded from the modules before they shared one AWS base
(module_utils/aws); a change to the modules' plumbing must leave every one the same. Left out: the
repository's path (replaced by ``<repo>``) and ``invocation`` (it lists the options, which may grow).

TRAINSTACK_WRITE_GOLDENS=1 writes the golden instead of comparing (only when a render is meant to change; say
so in the commit).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.amazon.aws.plugins.module_utils.modules import AnsibleAWSModule
from ansible_collections.trainstack.cluster.plugins.modules import (
    batch_cluster,
    eks_cluster,
    hyperpod_cluster,
    pcs_cluster,
)

from tests.support import REPO

pytestmark = pytest.mark.cluster

GOLDEN = Path(__file__).resolve().parent / "fixtures" / "cluster_module_renders.json"
WRITE = os.environ.get("TRAINSTACK_WRITE_GOLDENS") == "1"
SPECS = sorted(
    path
    for kind in ("batch", "eks", "hyperpod", "clusters")
    for path in (REPO / "inventories" / "aws" / kind).glob("*.yml")
)
MODULES = {
    "batch_cluster": batch_cluster,
    "eks_cluster": eks_cluster,
    "hyperpod_cluster": hyperpod_cluster,
    "pcs_cluster": pcs_cluster,
}
AMI = "ami-0d0d0d0d0d0d0d0d0"
TEMPLATE = {"id": "lt-0123456789abcdef0", "version": "1"}
# Every key any of the four modules' foundation takes, with a value of the right form.
FOUNDATION = {
    "batch_cluster": {
        "subnet_private": "subnet-0b0b0b0b0b0b0b0b0",
        "security_group": "sg-0c0c0c0c0c0c0c0c0",
        "instance_profile": "arn:aws:iam::123456789012:instance-profile/trainstack-node",
        "service_role": "arn:aws:iam::123456789012:role/trainstack-batch-service",
        "placement_group": "trainstack-placement",
    },
    "eks_cluster": {
        "subnet_public": "subnet-0a0a0a0a0a0a0a0a0",
        "subnet_private": "subnet-0b0b0b0b0b0b0b0b0",
        "control_plane_subnets": ["subnet-0e0e0e0e0e0e0e0e0"],
        "security_group": "sg-0c0c0c0c0c0c0c0c0",
        "cluster_role": "arn:aws:iam::123456789012:role/trainstack-eks-cluster",
        "node_role": "arn:aws:iam::123456789012:role/trainstack-eks-node",
        "placement_group": "trainstack-placement",
    },
    "hyperpod_cluster": {
        "subnet_private": "subnet-0b0b0b0b0b0b0b0b0",
        "security_group": "sg-0c0c0c0c0c0c0c0c0",
        "execution_role": "arn:aws:iam::123456789012:role/trainstack-hyperpod",
        "lifecycle_s3_uri": "s3://sagemaker-trainstack-golden/hyperpod/golden",
        "fsx_dns_name": "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com",
        "fsx_mount_name": "abcdefgh",
    },
    "pcs_cluster": {
        "subnet_public": "subnet-0a0a0a0a0a0a0a0a0",
        "subnet_private": "subnet-0b0b0b0b0b0b0b0b0",
        "security_group": "sg-0c0c0c0c0c0c0c0c0",
        "bucket": "trainstack-golden",
        "bundle_sha256": "ab" * 32,
        "instance_profile": "arn:aws:iam::123456789012:instance-profile/aws-pcs/trainstack-node",
        "placement_group": "trainstack-placement",
    },
}
VCPUS = {"p4d.24xlarge": 96, "p5.48xlarge": 192, "g6e.48xlarge": 192, "p6-b200.48xlarge": 192}


def arguments(module: str, spec: Path) -> dict[str, Any]:
    """The module's arguments for this spec: its foundation, and what else it needs to render at all."""
    args: dict[str, Any] = {"path": str(spec), "render_only": True, "foundation": FOUNDATION[module]}
    if module != "hyperpod_cluster":
        args["ami_id"] = AMI
    if module == "batch_cluster":
        args.update(image="registry.example/trainstack:ts-2026.10", vcpus=VCPUS)
    if module == "pcs_cluster":
        queues = [queue["name"] for queue in yaml.safe_load(spec.read_text())["queues"]]
        args.update(launch_template=TEMPLATE, launch_templates=dict.fromkeys(queues, TEMPLATE))
    return args


@pytest.fixture
def run_module(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    from ansible.module_utils.testing import patch_module_args

    def run(module: str, **args: Any) -> dict[str, Any]:
        code = MODULES[module]
        monkeypatch.setattr(
            AnsibleAWSModule, "client", lambda *_a, **_k: pytest.fail(f"{module} asked for a client")
        )
        capsys.readouterr()
        with patch_module_args(args), pytest.raises(SystemExit):
            code.main()
        result = json.loads(capsys.readouterr().out)
        result.pop("invocation", None)
        return json.loads(json.dumps(result).replace(str(REPO), "<repo>"))

    return run


def test_every_module_renders_every_example_spec_as_before(run_module) -> None:
    seen = {
        f"{module}/{spec.parent.name}/{spec.stem}": run_module(module, **arguments(module, spec))
        for module in MODULES
        for spec in SPECS
    }
    text = json.dumps(seen, indent=1, sort_keys=True) + "\n"
    if WRITE:
        GOLDEN.write_text(text)
    golden = json.loads(GOLDEN.read_text())
    assert sorted(golden) == sorted(seen)
    for case, result in seen.items():
        assert json.dumps(result, indent=1, sort_keys=True) == json.dumps(
            golden[case], indent=1, sort_keys=True
        ), case
    assert GOLDEN.read_text() == text
    # The golden holds renders, not only refusals: each module renders its own examples.
    rendered = {case.split("/")[0] for case, result in seen.items() if not result.get("failed")}
    assert rendered == set(MODULES)
