"""training_job's kubernetes launcher: the PyTorchJob asks for a whole node of its type, from the catalog.

The GPU and EFA counts are read from the instance catalog on both sides
(module_utils/catalog/instance_catalog.py), never written here, so a changed catalog entry moves the manifest
and the expectation together. The manifest is held to the Kubeflow training SDK's models of kubeflow.org/v1
and Kubernetes' pod schema (tests/support/kubernetes.py); a wrong manifest is shown to be refused by the same
check. Applying it needs a cluster's API server.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.catalog.instance_catalog import default

from tests.support import pytorchjob_problems

from .test_training_job_scripts import render


def manifest(tmp_path: Path, instance_type: str, **overrides: Any) -> dict[str, Any]:
    text = render(
        "pytorchjob.yaml.j2",
        tmp_path,
        training_job_launcher="kubernetes",
        training_job_k8s_image="registry.example/fsdp:1",
        training_job_testcase="pytorch/fsdp",
        training_job_instance_type=instance_type,
        training_job_nodes=2,
        **overrides,
    )
    return yaml.safe_load(text)


def container(job: dict[str, Any], role: str = "Worker") -> dict[str, Any]:
    return job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("instance_type", ["p5.48xlarge", "p4d.24xlarge", "p5en.48xlarge"])
def test_requests_every_gpu_and_efa_interface_of_the_catalog(tmp_path: Path, instance_type: str) -> None:
    entry = default().get(instance_type)
    # Fewer processes than GPUs: the pod still takes the whole node (its EFA interfaces come with all GPUs).
    job = manifest(tmp_path, instance_type, training_job_procs_per_node=4)
    for role in ("Master", "Worker"):
        limits = container(job, role)["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == str(entry.gpu_count)
        assert limits["vpc.amazonaws.com/efa"] == str(entry.efa_interfaces)


def test_p5_asks_for_8_gpus_and_32_efa_interfaces(tmp_path: Path) -> None:
    limits = container(manifest(tmp_path, "p5.48xlarge"))["resources"]["limits"]
    assert (limits["nvidia.com/gpu"], limits["vpc.amazonaws.com/efa"]) == ("8", "32")


def test_pods_land_on_their_instance_type_and_tolerate_the_gpu_taint(tmp_path: Path) -> None:
    pod = manifest(tmp_path, "p5.48xlarge")["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_manifest_passes_the_kubeflow_and_kubernetes_schemas(tmp_path: Path) -> None:
    assert pytorchjob_problems(manifest(tmp_path, "p5.48xlarge")) == []


def test_a_wrong_manifest_is_refused(tmp_path: Path) -> None:
    good = manifest(tmp_path, "p5.48xlarge")
    unknown = copy.deepcopy(good)
    container(unknown)["resource"] = container(unknown).pop("resources")
    assert any("resource" in p for p in pytorchjob_problems(unknown))
    mistyped = copy.deepcopy(good)
    mistyped["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "one"
    assert any("replicas" in p for p in pytorchjob_problems(mistyped))
    bad_toleration = copy.deepcopy(good)
    pod = bad_toleration["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    pod["tolerations"][0]["effect"] = 7
    assert pytorchjob_problems(bad_toleration)
