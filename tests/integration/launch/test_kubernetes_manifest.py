"""The kubernetes launcher renders a PyTorchJob that the Kubeflow API and Kubernetes' own schemas accept.

Offline stand-ins for an API server (tests/support/kubernetes.py): the Kubeflow training SDK's generated API
models (every field name and type of kubeflow.org/v1 PyTorchJob) and kubernetes-validate's JSON schemas of
Kubernetes 1.30 (strict, so an unknown field fails) for each replica's pod.

The image is training_job_container_image in a real registry (Debian's docker-registry on a loopback port,
tests/integration/image/oci_push.py): the launch reads its stack record and the pods run it pinned to the
manifest digest the registry answered with.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.image.oci_push import RECORD_ANNOTATION, record, running_registry
from tests.support import VENV_BIN, api_model_problems, pytorchjob_problems, run


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory, current_stack_id: str) -> Iterator[tuple[str, str]]:
    """(reference, pinned reference) of a CUDA 13.2 image in a real registry."""
    with running_registry(tmp_path_factory.mktemp("registry")) as registry:
        body = registry.image(
            "ml/trainstack/pytorch", current_stack_id, {RECORD_ANNOTATION: json.dumps(record("13.2"))}
        )
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        yield (
            f"{registry.host}/ml/trainstack/pytorch:{current_stack_id}",
            f"{registry.host}/ml/trainstack/pytorch@{digest}",
        )


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory, image: tuple[str, str]) -> dict:
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
            f"training_job_container_image={image[0]}",
            "-e",
            "training_job_container_allow_http=true",
            "-e",
            f"training_job_results_dir={results}",
        ]
    )
    (rendered,) = Path(results).glob("*/pytorchjob.yaml")
    return yaml.safe_load(rendered.read_text())


def test_pytorchjob_matches_the_kubeflow_api(manifest: dict) -> None:
    assert (manifest["apiVersion"], manifest["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert api_model_problems(manifest, "KubeflowOrgV1PyTorchJob") == []


def test_replicas_and_resources(manifest: dict) -> None:
    specs = manifest["spec"]["pytorchReplicaSpecs"]
    assert (specs["Master"]["replicas"], specs["Worker"]["replicas"]) == (1, 3)
    limits = specs["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "8"
    assert limits["vpc.amazonaws.com/efa"] == "32"
    env = {e["name"]: e["value"] for e in specs["Worker"]["template"]["spec"]["containers"][0]["env"]}
    assert env["FI_PROVIDER"] == "efa"
    assert env["FI_EFA_USE_DEVICE_RDMA"] == "1"


def test_pods_run_the_image_pinned_to_its_digest(manifest: dict, image: tuple[str, str]) -> None:
    for spec in manifest["spec"]["pytorchReplicaSpecs"].values():
        assert spec["template"]["spec"]["containers"][0]["image"] == image[1]


def test_pods_pass_kubernetes_schema(manifest: dict) -> None:
    assert pytorchjob_problems(manifest) == []
