"""training_job's checks and plan (module_utils/launch/plan.py), called directly with the role's defaults: a
valid request passes every rule, and each bad value fails exactly the rule about it, with a message that names
the variable. The templates' tests render with the plan these helpers compute, as the role's tasks do.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.trainstack.cluster.plugins.action.training_job_plan import (
    instance_entry,
    known_variables,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.catalog.instance_catalog import (
    default as catalog,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.launch import plan
from ansible_collections.trainstack.cluster.plugins.module_utils.launch.names import close_matches

from tests.support import REPO

ROLE = REPO / "roles" / "training_job"
# Inputs that stand for what the role's tasks read or register before the plan is made.
GIVEN = ("__training_job_manifest", "__training_job_image_info", "__training_job_catalog")


def role_vars(manifest: str = "pytorch/fsdp", **overrides: Any) -> dict[str, Any]:
    """The role's defaults and vars as a play would see them (test case ``manifest``), with overrides, and
    ``__training_job_plan`` as trainstack.cluster.training_job_plan makes it from them."""
    loader = DataLoader()
    merged: dict[str, Any] = {"role_path": str(ROLE)}
    merged |= loader.load_from_file(str(ROLE / "defaults" / "main.yml"), trusted_as_template=True)
    merged["training_job_testcase"] = manifest
    merged |= {key: value for key, value in overrides.items() if key not in GIVEN}
    merged |= loader.load_from_file(str(ROLE / "vars" / "main.yml"), trusted_as_template=True)
    templar = Templar(loader=loader, variables=merged)
    request = {
        key: templar.template(value) for key, value in merged.items() if key.startswith("training_job_")
    }
    catalog_dir = str(
        overrides.get("__training_job_catalog") or templar.template(merged["__training_job_catalog"])
    )
    data = overrides.get("__training_job_manifest") or loader.load_from_file(
        str(REPO / "testcases" / manifest / "testcase.yml")
    )
    image = overrides.get("__training_job_image_info")
    instance = instance_entry(request["training_job_instance_type"])
    merged["__training_job_request"] = request
    merged["__training_job_plan"] = plan.launch_plan(
        request, data, catalog_dir, instance, image, os.environ.get("TMPDIR", "")
    )
    merged["__training_job_problems"] = {
        "input": plan.input_problems(request, catalog().names()),
        "request": plan.request_problems(request, data, catalog_dir, instance),
        "image": plan.image_problems(request, image or {}, instance),
    }
    return merged


def render(expression: str, manifest: str = "pytorch/fsdp", **overrides: Any) -> Any:
    templar = Templar(loader=DataLoader(), variables=role_vars(manifest, **overrides))
    return templar.template(trust_as_template(expression))


def failed(rules: str, manifest: str = "pytorch/fsdp", **overrides: Any) -> list[str]:
    """Messages of the rules (input, request or image) that the request breaks."""
    return role_vars(manifest, **overrides)["__training_job_problems"][rules]


def test_a_valid_request_passes_every_rule() -> None:
    assert failed("input") == []
    assert failed("request") == []
    assert (
        failed(
            "input",
            training_job_launcher="kubernetes",
            training_job_k8s_image="nvcr.io/nvidia/pytorch:25.01-py3",
        )
        == []
    )


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        ({"training_job_name": ".."}, "training_job_name '..'"),
        ({"training_job_name": "."}, "training_job_name '.'"),
        ({"training_job_name": ""}, "training_job_name ''"),
        ({"training_job_name": "a/b"}, "training_job_name 'a/b'"),
        ({"training_job_name": "x;rm -rf /"}, "training_job_name"),
        ({"training_job_shared_dir": "/"}, "training_job_shared_dir '/'"),
        ({"training_job_shared_dir": ""}, "training_job_shared_dir ''"),
        ({"training_job_shared_dir": "fsx"}, "training_job_shared_dir 'fsx'"),
        ({"training_job_shared_dir": "/fsx/../etc"}, "training_job_shared_dir '/fsx/../etc'"),
        ({"training_job_shared_dir": "/fsx/."}, "training_job_shared_dir '/fsx/.'"),
        ({"training_job_results_dir": "//"}, "training_job_results_dir '//'"),
        ({"training_job_python": "python3"}, "training_job_python 'python3'"),
        ({"training_job_nodes": 0}, "training_job_nodes must be >= 1"),
        (
            {"training_job_nodes": 2, "training_job_nodelist": ["n1"]},
            "training_job_nodelist must be empty or name",
        ),
        (
            {"training_job_nodes": 2, "training_job_nodelist": ["n1", "n1"]},
            "training_job_nodelist must be empty or",
        ),
        (
            {"training_job_nodes": 1, "training_job_nodelist": ["n1;reboot"]},
            "training_job_nodelist must be empty or",
        ),
        ({"training_job_procs_per_node": 0}, "training_job_procs_per_node must be >= 1"),
        ({"training_job_timeout": 0}, "training_job_timeout must be >= 1"),
        ({"training_job_rdzv_port": 70000}, "training_job_rdzv_port must be a port number"),
        ({"training_job_checkpoint_every": -1}, "training_job_checkpoint_every must be >= 0"),
        ({"training_job_partition": "gpu q"}, "training_job_partition 'gpu q'"),
        ({"training_job_instance_type": "p9.huge"}, "training_job_instance_type 'p9.huge' is unknown"),
        ({"training_job_env": {"A B": "1"}}, "training_job_env has key(s)"),
        ({"training_job_env": {"X=1;": "1"}}, "training_job_env has key(s)"),
        ({"training_job_env": {"A": ["1"]}}, "training_job_env values"),
        ({"training_job_pip_env": {"$(id)": "1"}}, "training_job_pip_env has key(s)"),
        ({"training_job_args": {"batch_size": 8}}, "training_job_args key(s) ['batch_size']"),
        ({"training_job_args": {"--steps": 8}}, "training_job_args key(s) ['--steps']"),
        ({"training_job_args": {"steps": {"a": 1}}}, "training_job_args values"),
        ({"training_job_container_image": "img; id"}, "training_job_container_image 'img; id'"),
        ({"training_job_launcher": "kubernetes"}, "training_job_k8s_image ''"),
        ({"training_job_nsys_ranks": [1]}, "training_job_nsys_ranks [1]"),
        ({"training_job_nsys_delay": -1}, "training_job_nsys_delay"),
        ({"training_job_nsys_args": "--trace=cuda; id"}, "training_job_nsys_args"),
        ({"training_job_nsys_bin": "nsys x"}, "training_job_nsys_bin 'nsys x'"),
    ],
)
def test_each_bad_input_fails_only_its_own_rule(overrides: dict[str, Any], names: str) -> None:
    messages = failed("input", **overrides)
    assert len(messages) == 1, messages
    assert names in messages[0]


def test_kubernetes_names_must_be_dns_labels() -> None:
    base = {"training_job_launcher": "kubernetes", "training_job_k8s_image": "img:1"}
    (message,) = failed("input", **base, training_job_k8s_namespace="Team_A")
    assert message.startswith("training_job_k8s_namespace 'Team_A'")
    (message,) = failed("input", **base, training_job_name="Pytorch_fsdp")
    assert "training_job_name 'Pytorch_fsdp' must be a lowercase DNS label" in message


def test_misspelt_argument_keys_get_the_cli_spelling() -> None:
    (message,) = failed("input", training_job_args={"Batch_Size": 8, "seq-len": 64})
    assert "['Batch_Size']" in message and "['batch-size']" in message


@pytest.mark.parametrize(
    ("overrides", "text"),
    [
        ({"training_job_launcher": "local", "training_job_nodes": 2}, "The local launcher runs on one node"),
        (
            {"training_job_launcher": "local", "training_job_nodelist": ["n1"]},
            "training_job_nodelist names Slurm nodes; the local launcher cannot use it",
        ),
        (
            {"training_job_args": {"config": "llama9"}},
            "Unknown config llama9 for pytorch/fsdp; known: tiny, small",
        ),
    ],
)
def test_request_rules_name_only_what_failed(overrides: dict[str, Any], text: str) -> None:
    (message,) = failed("request", **overrides)
    assert text in message


def test_a_launcher_the_test_case_lacks_is_named() -> None:
    manifest = {**role_vars()["__training_job_plan"]["manifest"], "launchers": ["slurm"]}
    messages = failed("request", training_job_launcher="kubernetes", __training_job_manifest=manifest)
    assert messages == ["pytorch/fsdp cannot run with the kubernetes launcher; it supports slurm."]


def test_unknown_variables_are_found_by_name() -> None:
    known = known_variables(str(ROLE / "meta" / "argument_specs.yml"))
    assert "training_job_nodes" in known and "training_job_nsys_ranks" in known
    assert "training_job_nodez" not in known


def test_close_matches_suggest_the_meant_name() -> None:
    known = known_variables(str(ROLE / "meta" / "argument_specs.yml"))
    assert close_matches(["training_job_nodez"], known, "training_job_") == (
        "training_job_nodez (close: training_job_nodes, training_job_node_os, training_job_nodelist)"
    )
    text = close_matches(["training_job_lancher", "training_job_zzz"], known, "training_job_")
    assert text == "training_job_lancher (close: training_job_launcher); training_job_zzz (no close match)"


def test_close_matches_rank_best_first_and_keep_three() -> None:
    options = ["batch-size", "batch-sizes", "batch-sized", "batch-sizer", "seq-len", "steps"]
    assert (
        close_matches(["batch_size"], options) == "batch_size (close: batch-size, batch-sized, batch-sizer)"
    )
    assert close_matches(["step"], options) == "step (close: steps)"


def test_included_packages_are_packed_beside_the_entrypoint() -> None:
    """A case imports the shared training library: the tar gets it as a member from its own parent."""
    args = render("{{ __training_job_plan.payload_includes }}", "torchtitan/llama")
    assert args == [{"directory": f"{ROLE / '..' / '..' / 'testcases'}/common", "name": "trainstack_train"}]
    assert render("{{ __training_job_plan.payload_includes }}") == args
    assert render("{{ __training_job_plan.payload_includes }}", "nccl/collectives") == []
    assert failed("request", "torchtitan/llama") == []


@pytest.mark.parametrize("include", [["../etc"], ["pytorch/fsdp/missing"], ["/abs/path"], ["pytorch/./fsdp"]])
def test_an_include_outside_the_catalog_is_refused(include: list[str]) -> None:
    manifest = {**role_vars("torchtitan/llama")["__training_job_plan"]["manifest"], "include": include}
    messages = failed("request", "torchtitan/llama", __training_job_manifest=manifest)
    assert len(messages) == 1 and "must list directories under testcases/" in messages[0]


def test_the_arguments_become_the_command_line_the_rules_check_sees() -> None:
    cli = render(
        "{{ __training_job_plan.cli }}",
        "torchtitan/llama",
        training_job_args={"tp": 2, "compile": True, "data": None},
        training_job_nodes=2,
        training_job_procs_per_node=4,
    )
    pairs = dict(zip(cli[::2], cli[1::2], strict=True))
    defaults = {"--config": "tiny", "--steps": "20", "--batch-size": "8", "--seq-len": "128"}
    assert pairs == {**defaults, "--tp": "2", "--compile": "True"}
    assert (
        render("{{ __training_job_plan.world_size }}", training_job_nodes=2, training_job_procs_per_node=4)
        == 8
    )
