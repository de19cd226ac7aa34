"""training_job hands the test case its GPU's dense BF16 peak, the MFU denominator, from the instance catalog.

The test cases keep no GPU table (they are payloads staged onto clusters and cannot import the collection);
they read TRAINSTACK_GPU_PEAK_TFLOPS. Every launcher gets it from the same derived job environment: the local
and Slurm scripts are rendered from the role's templates and run by bash with the recorder of
test_training_job_scripts standing where torchrun runs; the PyTorchJob manifest is parsed and expanded as
Kubernetes does. The expected value is read from the catalog
(plugins/module_utils/catalog/instance_catalog.py), so a changed catalog entry moves both sides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.catalog.instance_catalog import default

from .test_training_job_inputs import render as render_expression
from .test_training_job_scripts import (
    kubernetes_expand,
    render,
    run_batch_script,
    run_script,
)

PEAK_ENV = "TRAINSTACK_GPU_PEAK_TFLOPS"
H200_TYPE = "p5en.48xlarge"


def catalog_peak(instance_type: str) -> float | None:
    """The catalog's dense BF16 FLOP/s of the type, in TFLOP/s (None where it has none)."""
    flops = default().get(instance_type).bf16_dense_flops
    return None if flops is None else flops / 1e12


def local_env(tmp_path: Path, **overrides: Any) -> dict[str, str]:
    script = tmp_path / "run" / "run.sh"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(render("run-local.sh.j2", tmp_path, training_job_launcher="local", **overrides))
    return run_script(script, tmp_path)["env"]


def slurm_env(tmp_path: Path, **overrides: Any) -> dict[str, str]:
    script = tmp_path / "run" / "job.sbatch"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(render("job.sbatch.j2", tmp_path, **overrides))
    return run_batch_script(script, tmp_path)["env"]


def kubernetes_env(tmp_path: Path, **overrides: Any) -> dict[str, str]:
    """The Master container's environment as the pod sees it (the Workers' is the same template)."""
    text = render(
        "pytorchjob.yaml.j2",
        tmp_path,
        training_job_launcher="kubernetes",
        training_job_k8s_image="registry.example/fsdp:1",
        training_job_nodes=2,
        **overrides,
    )
    manifest = yaml.safe_load(text)
    (container,) = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    return {item["name"]: kubernetes_expand(item["value"], {}) for item in container["env"]}


LAUNCHERS = {"local": local_env, "slurm": slurm_env, "kubernetes": kubernetes_env}


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_every_launcher_exports_the_catalog_peak(launcher: str, tmp_path: Path) -> None:
    env = LAUNCHERS[launcher](tmp_path / "h200", training_job_instance_type=H200_TYPE)
    expected = catalog_peak(H200_TYPE)
    assert expected is not None
    assert float(env[PEAK_ENV]) == pytest.approx(expected, rel=1e-9)
    # The rest of the type's environment still arrives beside it.
    assert env["FI_PROVIDER"] == "efa"
    # No type, or one whose catalog entry has no peak (the CPU lab, a `local` machine): nothing is made up.
    for instance_type in ("", "lab", "local"):
        assert PEAK_ENV not in LAUNCHERS[launcher](
            tmp_path / (instance_type or "none"), training_job_instance_type=instance_type
        )


def test_the_callers_environment_wins(tmp_path: Path) -> None:
    derived = local_env(tmp_path / "derived", training_job_instance_type=H200_TYPE)
    given = local_env(
        tmp_path / "given", training_job_instance_type=H200_TYPE, training_job_env={PEAK_ENV: "500"}
    )
    assert float(derived[PEAK_ENV]) == pytest.approx(catalog_peak(H200_TYPE), rel=1e-9)
    assert given[PEAK_ENV] == "500"


@pytest.mark.parametrize("instance_type", default().names())
def test_each_catalog_type_maps_to_its_own_peak(instance_type: str) -> None:
    environment = render_expression(
        "{{ __training_job_plan.environment }}", training_job_instance_type=instance_type
    )
    expected = catalog_peak(instance_type)
    if expected is None:
        assert PEAK_ENV not in environment
    else:
        assert float(environment[PEAK_ENV]) == pytest.approx(expected, rel=1e-9)


ARCH_ENV = "TRAINSTACK_GPU_ARCH"


@pytest.mark.parametrize("instance_type", ["p4d.24xlarge", H200_TYPE, "g6e.48xlarge", "trn1.32xlarge", "lab"])
def test_the_catalog_gpu_arch_reaches_the_job(instance_type: str) -> None:
    """pytorch/fsdp refuses --precision fp8 below sm_89 from this variable: an A100 type must say sm_80."""
    environment = render_expression(
        "{{ __training_job_plan.environment }}", training_job_instance_type=instance_type
    )
    assert environment.get(ARCH_ENV) == default().get(instance_type).gpu_arch
