"""The kubernetes launcher renders a PyTorchJob that the Kubeflow API and Kubernetes' own schemas accept.

Offline stand-ins for an API server: the Kubeflow training SDK's generated API models (every field name and
type of kubeflow.org/v1 PyTorchJob) and kubernetes-validate's JSON schemas of Kubernetes 1.30 (strict, so an
unknown field fails) for each replica's pod.
"""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes.client.models as k8s_models
import kubernetes_validate
import pytest
import yaml
from kubeflow.training import models as kf_models

from tests.support import VENV_BIN, run


def _model(name: str) -> type:
    return getattr(kf_models, name, None) or getattr(k8s_models, name)


def check_against_model(value: object, type_name: str, path: str = "$") -> None:
    """Walk a manifest along the generated API models; unknown or mistyped fields fail, naming their path."""
    if type_name.startswith("list["):
        assert isinstance(value, list), f"{path}: expected a list"
        for i, item in enumerate(value):
            check_against_model(item, type_name[5:-1], f"{path}[{i}]")
        return
    if type_name.startswith("dict("):
        inner = re.match(r"dict\(str, (.+)\)", type_name).group(1)
        assert isinstance(value, dict), f"{path}: expected a mapping"
        for key, item in value.items():
            check_against_model(item, inner, f"{path}.{key}")
        return
    if type_name in ("str", "int", "bool", "float", "object", "datetime"):
        expected = {"str": str, "int": int, "bool": bool, "float": (int, float)}.get(type_name, object)
        assert isinstance(value, expected), f"{path}: expected {type_name}, got {value!r}"
        return
    model = _model(type_name)
    assert isinstance(value, dict), f"{path}: expected a {type_name} mapping"
    by_json = {json_key: attr for attr, json_key in model.attribute_map.items()}
    unknown = set(value) - set(by_json)
    assert not unknown, f"{path}: {type_name} has no field(s) {sorted(unknown)}"
    for key, item in value.items():
        check_against_model(item, model.openapi_types[by_json[key]], f"{path}.{key}")


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> dict:
    results = tmp_path_factory.mktemp("k8s")
    run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "trainstack.cluster.launch_training",
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            "launch_host=localhost",
            "-e",
            f"ansible_python_interpreter={VENV_BIN / 'python'}",
            "-e",
            "training_job_launcher=kubernetes",
            "-e",
            "training_job_testcase=pytorch/fsdp",
            "-e",
            "training_job_nodes=4",
            "-e",
            "training_job_procs_per_node=8",
            "-e",
            "training_job_instance_type=p5.48xlarge",
            "-e",
            "training_job_k8s_image=registry.example/fsdp:1",
            "-e",
            f"training_job_results_dir={results}",
        ]
    )
    (rendered,) = Path(results).glob("*/pytorchjob.yaml")
    return yaml.safe_load(rendered.read_text())


def test_pytorchjob_matches_the_kubeflow_api(manifest: dict) -> None:
    assert (manifest["apiVersion"], manifest["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    check_against_model(manifest, "KubeflowOrgV1PyTorchJob")


def test_replicas_and_resources(manifest: dict) -> None:
    specs = manifest["spec"]["pytorchReplicaSpecs"]
    assert (specs["Master"]["replicas"], specs["Worker"]["replicas"]) == (1, 3)
    limits = specs["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "8"
    assert limits["vpc.amazonaws.com/efa"] == "32"
    env = {e["name"]: e["value"] for e in specs["Worker"]["template"]["spec"]["containers"][0]["env"]}
    assert env["FI_PROVIDER"] == "efa"
    assert env["FI_EFA_USE_DEVICE_RDMA"] == "1"


@pytest.mark.parametrize("role", ["Master", "Worker"])
def test_pods_pass_kubernetes_schema(manifest: dict, role: str) -> None:
    template = manifest["spec"]["pytorchReplicaSpecs"][role]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x", **template["metadata"]},
        "spec": template["spec"],
    }
    kubernetes_validate.validate(pod, "1.30.0", strict=True)
