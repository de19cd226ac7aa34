"""pytorch/fsdp in the project's own container image on the lab's Slurm cluster, beside the same run on the
nodes.

The image is the pytorch flavour of playbooks/build_container.yml (the base flavour under it, the stack's CPU
torch from the lab's wheelhouse), pushed to the lab registry as a Docker schema 2 manifest
(``container_registry_format=v2s2``): enroot 4.1.2 first asks a registry for the manifest without an Accept
header, and Debian's docker-registry answers that with 404 for an OCI manifest (docs/fabric.md). enroot and
pyxis are the enroot_pyxis role's, built from their release sources on the head and compute nodes (the
fixtures of tests/integration/fabric/test_enroot_lab.py). launch_training reads the image's stack record
from its configuration label, imports the image once into the shared directory with enroot and starts it with
pyxis on both compute nodes. The same test case, seed and data also run on the nodes' own virtualenv: every
step's loss must agree.

Slow (marked ``slow``): enroot and pyxis on three nodes, two image layers built and pushed, the import.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from tests.integration.fabric.test_enroot_lab import (  # noqa: F401 - fixtures, used by name
    COMPUTE1,
    enroot_nodes,
    image,
    registry,
    source_mirror,
)
from tests.integration.image.test_container_build import build
from tests.support import lab_ssh

from .conftest import SHARED, fsdp_on_both_nodes, launch, results_dir

pytestmark = [pytest.mark.lab, pytest.mark.slow]

IMAGE_PYTHON = "/opt/trainstack/venv/bin/python"
METRIC_PREFIX = "TRAINSTACK_METRIC "


@pytest.fixture(scope="module")
def pytorch_image(
    enroot_nodes: None,  # noqa: F811 - the imported fixture, by name
    registry: str,  # noqa: F811 - the imported fixture, by name
    tmp_path_factory: pytest.TempPathFactory,
) -> str:
    """The pytorch image pushed as Docker schema 2 to the lab registry: the reference launch_training takes
    (registry/namespace/repository:content tag)."""
    out = tmp_path_factory.mktemp("container-build")
    build(f"{registry}/ctr", out, container_flavours=["pytorch"], container_registry_format="v2s2")
    record = json.loads((out / "pytorch.json").read_text())
    return f"{record['registry']['repository']}:{record['tags'][0]}"


def _losses(run_dir: Path) -> list[tuple[int, float]]:
    """Every step's (step, loss) from the job's metric lines."""
    lines = (run_dir / "job.log").read_text().splitlines()
    metrics = [json.loads(line.split(METRIC_PREFIX, 1)[1]) for line in lines if METRIC_PREFIX in line]
    return [(m["step"], m["loss"]) for m in metrics if "step" in m and "loss" in m]


def test_fsdp_trains_in_the_image_as_on_the_nodes(lab_ready: None, pytorch_image: str) -> None:
    # The image's interpreter exists only in the image: a step that ran there ran in the container.
    assert lab_ssh(COMPUTE1, f"test -e {IMAGE_PYTHON}").returncode != 0
    name = f"ctr-{uuid.uuid4().hex[:8]}"
    # The image first: its launch finds no interpreter on the submit host to read the entrypoint's options.
    inside = launch(
        *fsdp_on_both_nodes(
            f"{name}-image",
            "-e",
            f"training_job_container_image={pytorch_image}",
            "-e",
            "training_job_container_allow_http=true",
            "-e",
            "training_job_venv=false",
            "-e",
            f"training_job_python={IMAGE_PYTHON}",
        )
    )
    bare = launch(*fsdp_on_both_nodes(f"{name}-nodes"))
    on_nodes, in_image = results_dir(bare.stdout), results_dir(inside.stdout)
    summary = json.loads((in_image / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["nodes"] == 2
    log = (in_image / "job.log").read_text()
    # Imported once, by content, into the shared directory; pyxis started that file on both nodes.
    started = re.search(r"^trainstack: container (\S+)@(sha256:[0-9a-f]{64}) from (\S+)$", log, re.MULTILINE)
    assert started and started.group(1) == pytorch_image.rsplit(":", 1)[0], log[-3000:]
    # The file pyxis started is the one the import wrote, named by the image's content.
    sqsh = f"/shared/trainstack/containers/{started.group(2).replace(':', '-')}.sqsh"
    assert started.group(3) == sqsh
    assert (SHARED / "trainstack" / "containers" / Path(sqsh).name).is_file(), log[-3000:]
    expected, got = _losses(on_nodes), _losses(in_image)
    assert len(got) == len(expected) == summary["steps"], (expected, got)
    assert [pair[0] for pair in got] == [pair[0] for pair in expected]
    worst = max(abs(ours[1] - theirs[1]) / abs(theirs[1]) for ours, theirs in zip(got, expected, strict=True))
    assert worst < 1e-5, list(zip(expected, got, strict=True))
