"""training_job's input rules and close-match suggestions, rendered by Ansible's own templar from the role's
defaults and vars: a valid request passes every rule, and each bad value fails exactly the rule about it, with
a message that names the variable.
"""

from __future__ import annotations

from typing import Any

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from tests.support import REPO

ROLE = REPO / "roles" / "training_job"


def role_vars(manifest: str = "pytorch/fsdp", **overrides: Any) -> dict[str, Any]:
    """The role's defaults and vars as a play would see them (test case ``manifest``), with overrides."""
    loader = DataLoader()
    merged: dict[str, Any] = {"role_path": str(ROLE)}
    merged |= loader.load_from_file(str(ROLE / "defaults" / "main.yml"), trusted_as_template=True)
    merged["training_job_testcase"] = manifest
    merged |= overrides
    merged |= loader.load_from_file(str(ROLE / "vars" / "main.yml"), trusted_as_template=True)
    merged["__training_job_manifest"] = loader.load_from_file(
        str(REPO / "testcases" / manifest / "testcase.yml")
    )
    return merged


def render(expression: str, manifest: str = "pytorch/fsdp", **overrides: Any) -> Any:
    templar = Templar(loader=DataLoader(), variables=role_vars(manifest, **overrides))
    return templar.template(trust_as_template(expression))


def failed(rules: str, manifest: str = "pytorch/fsdp", **overrides: Any) -> list[str]:
    """Messages of the rules (input or request) that the request breaks."""
    return render(
        f"{{{{ __training_job_{rules}_rules | rejectattr('ok') | map(attribute='msg') | list }}}}",
        manifest,
        **overrides,
    )


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
    overrides = {"training_job_launcher": "kubernetes"}
    variables = role_vars(**overrides)
    variables["__training_job_manifest"] = {**variables["__training_job_manifest"], "launchers": ["slurm"]}
    messages = Templar(loader=DataLoader(), variables=variables).template(
        trust_as_template(
            "{{ __training_job_request_rules | rejectattr('ok') | map(attribute='msg') | list }}"
        )
    )
    assert messages == ["pytorch/fsdp cannot run with the kubernetes launcher; it supports slurm."]


def test_unknown_variables_are_found_by_name() -> None:
    known = render("{{ __training_job_known_vars }}")
    assert "training_job_nodes" in known and "training_job_nsys_ranks" in known
    assert "training_job_nodez" not in known


def close_matches(unknown: list[str], known: list[str], prefix: str = "") -> str:
    templar = Templar(
        loader=DataLoader(),
        variables={"__unknown": unknown, "__known": known, "__prefix": prefix},
    )
    return templar.template(trust_as_template((ROLE / "templates" / "close_matches.j2").read_text())).strip()


def test_close_matches_suggest_the_meant_name() -> None:
    known = render("{{ __training_job_known_vars }}")
    assert close_matches(["training_job_nodez"], known, "training_job_") == (
        "training_job_nodez (close: training_job_nodes, training_job_nodelist)"
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
    """torchtitan/llama imports pytorch/fsdp's package: the tar gets it as a member from its own parent."""
    args = render("{{ __training_job_include_tar_args }}", "torchtitan/llama")
    assert args == [f"--directory={ROLE / '..' / '..' / 'testcases'}/pytorch/fsdp", "fsdp_llama"]
    assert render("{{ __training_job_include_tar_args }}") == []
    assert failed("request", "torchtitan/llama") == []


@pytest.mark.parametrize("include", [["../etc"], ["pytorch/fsdp/missing"], ["/abs/path"], ["pytorch/./fsdp"]])
def test_an_include_outside_the_catalog_is_refused(include: list[str]) -> None:
    variables = role_vars("torchtitan/llama")
    variables["__training_job_manifest"] = {**variables["__training_job_manifest"], "include": include}
    templar = Templar(loader=DataLoader(), variables=variables)
    messages = templar.template(
        trust_as_template(
            "{{ __training_job_request_rules | rejectattr('ok') | map(attribute='msg') | list }}"
        )
    )
    assert len(messages) == 1 and "must list directories under testcases/" in messages[0]


def test_the_arguments_become_the_command_line_the_rules_check_sees() -> None:
    cli = render(
        "{{ __training_job_cli }}",
        "torchtitan/llama",
        training_job_args={"tp": 2, "compile": True, "data": None},
        training_job_nodes=2,
        training_job_procs_per_node=4,
    )
    pairs = dict(zip(cli[::2], cli[1::2], strict=True))
    defaults = {"--config": "tiny", "--steps": "20", "--batch-size": "8", "--seq-len": "128"}
    assert pairs == {**defaults, "--tp": "2", "--compile": "True"}
    assert render("{{ __training_job_world_size }}", training_job_nodes=2, training_job_procs_per_node=4) == 8
