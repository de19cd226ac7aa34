"""The flavours that PCS and AWS Batch nodes boot: their roles in the one flavour table
(playbooks/build_image.yml), and the stack pins those roles need on the AMI's systems."""

from __future__ import annotations

import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster.pcs_render import (
    PCS_SLURM_VERSIONS,
    slurm_version,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.stack.stack_matrix import resolve

from tests.support import REPO, current_stack

AMI_SYSTEMS = ("ubuntu-22.04", "ubuntu-24.04", "amzn-2023")


def flavour_roles() -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """Each flavour's (role, components) in order, nested flavours (YAML anchors) flattened."""
    play = yaml.safe_load((REPO / "playbooks" / "build_image.yml").read_text())
    table = next(p for p in play if p.get("hosts") == "all")["vars"]["image_flavours"]

    def flat(entries: list) -> list:
        return [e for item in entries for e in (flat(item) if isinstance(item, list) else [item])]

    return {
        name: [(e["role"], tuple(e["components"])) for e in flat(entries)] for name, entries in table.items()
    }


def test_pcs_gpu_is_base_gpu_with_slurm_and_the_pcs_agent() -> None:
    flavours = flavour_roles()
    assert flavours["pcs-gpu"] == [
        *flavours["base-gpu"],
        ("slurm", ("slurm",)),
        ("pcs_agent", ("pcs_agent",)),
    ]


def test_batch_gpu_is_base_gpu_with_the_ecs_agent_after_the_nvidia_runtime() -> None:
    """The ECS agent hands containers their GPUs through the NVIDIA runtime container_runtime registers."""
    flavours = flavour_roles()
    assert flavours["batch-gpu"] == [*flavours["base-gpu"], ("ecs_agent", ("ecs_agent",))]
    roles = [role for role, _components in flavours["batch-gpu"]]
    assert roles.index("container_runtime") < roles.index("ecs_agent")


@pytest.mark.parametrize("system", AMI_SYSTEMS)
def test_the_current_stack_gives_pcs_nodes_the_agent_and_a_slurm_pcs_runs(system: str) -> None:
    """Where the pcs-gpu AMI is built, the stack pins the agent and a Slurm release PCS runs (the rule
    trainstack.cluster.pcs_cluster applies to a cluster's stack)."""
    stack = current_stack()
    components = resolve(stack, system, "x86_64")
    assert components["pcs_agent"]["artifacts"][0]["name"] == "aws-pcs-agent"
    release, problems = slurm_version({"id": stack["id"], "components": components})
    assert problems == [] and release in PCS_SLURM_VERSIONS


def test_the_lab_image_has_no_pcs_agent_and_a_slurm_pcs_does_not_run() -> None:
    """Debian 12 (the lab) is no PCS system: no agent, and its Slurm 22.05 is refused by the same rule."""
    stack = current_stack()
    components = resolve(stack, "debian-12", "x86_64")
    assert "pcs_agent" not in components
    release, problems = slurm_version({"id": stack["id"], "components": components})
    assert release is None and "Slurm 22.05" in problems[0]


def test_the_ecs_agent_is_pinned_for_amazon_linux_2023_only() -> None:
    """Batch's ECS_AL2023_NVIDIA image type runs Amazon Linux 2023: the batch-gpu flavour's only system."""
    stack = current_stack()
    pinned = [s for s in AMI_SYSTEMS if "ecs_agent" in resolve(stack, s, "x86_64")]
    assert pinned == ["amzn-2023"]
    assert resolve(stack, "amzn-2023", "aarch64")["ecs_agent"]["packages"] == ["ecs-init"]


@pytest.mark.parametrize(("flavour", "refused"), [("pcs-gpu", False), ("slurm-gpu", True), ("eks-gpu", True)])
def test_pcs_refuses_a_spec_whose_tags_find_an_image_of_another_flavour(flavour: str, refused: bool) -> None:
    """The tag look-up would find an AMI without the PCS agent: refused naming image.tags, before any call."""
    from tests.unit.plugins.module_utils import test_pcs_render as pcs

    raw = yaml.safe_load(pcs.EXAMPLES["p4d"].read_text())
    raw["image"]["tags"] = {**raw["image"]["tags"], "trainstack:flavour": flavour}
    spec = pcs.cluster_spec.normalise(raw, "p4d")
    message = f"image.tags: trainstack:flavour is '{flavour}'; these nodes boot the pcs-gpu image"
    if refused:
        assert any(p.startswith(message) for p in pcs.refusal(spec, launch_templates=pcs.own_templates(spec)))
    else:
        pcs.pcs_render.render(spec, pcs.FOUNDATION, pcs.AMI, pcs.SHARED_TEMPLATE, pcs.own_templates(spec))


def test_every_component_of_a_flavour_has_a_probe_in_the_image_manifest() -> None:
    """The self-check requires every component of the flavour's applied roles: image_manifest must be able to
    read each one's installed version, or the build fails on a component it did install."""
    probes = set(
        yaml.safe_load((REPO / "roles" / "image_manifest" / "vars" / "main.yml").read_text())[
            "__image_manifest_probes"
        ]
    )
    framework = {"pytorch"}  # image_manifest's tasks probe the framework with the image's Pythons
    named = {c for entries in flavour_roles().values() for _role, components in entries for c in components}
    assert named - probes - framework == set()
