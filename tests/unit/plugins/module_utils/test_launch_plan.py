"""The launch plan (module_utils/launch/plan.py) against the golden taken from the role's former Jinja rules.

tests/data/golden/launch_plans.json holds, for every test case, launcher, instance type, virtualenv choice and
container image answer, and for a set of bad inputs, what the training_job role computed when its rules were
Jinja in vars/main.yml: paths, virtualenv, arguments, command line, environment, container import, and the
message of every rule broken. The Python plan must give the same for each, message for message.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.action.training_job_plan import (
    catalog_testcases,
    instance_entry,
    known_variables,
    refusals,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.catalog.instance_catalog import (
    default as catalog,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.launch import plan
from ansible_collections.trainstack.cluster.plugins.module_utils.launch.names import close_matches

from tests.support import REPO

GOLDEN = json.loads((REPO / "tests" / "data" / "golden" / "launch_plans.json").read_text())
ROLE = REPO / "roles" / "training_job"
# As the role passes it: role_path/../../testcases.
CATALOG = f"{ROLE}/../../testcases"
SPECS = str(ROLE / "meta" / "argument_specs.yml")
GOLDEN_TMPDIR = "/tmp/golden-tmp"
# What the role reads about the nodes when a golden case names nothing else: the launch host's facts on an
# Ubuntu 24.04 image (a lab case ignores them: without GPUs the lab's lock is taken whatever the OS).
GOLDEN_NODE = {"os": "ubuntu-24.04", "arch": "x86_64"}
VENV_KEY = re.compile(r"(?<=-)[0-9a-f]{16}(?=(/|$))")


def request(testcase: str = "pytorch/fsdp", **overrides: Any) -> dict[str, Any]:
    """The role's variables for ``testcase``: its plain defaults, the templated ones resolved, then "
    "overrides."""
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values = {**defaults, "training_job_testcase": testcase, "training_job_shared_dir": "/fsx"}
    values |= {"training_job_results_dir": "/results", "training_job_pip_env": {}}
    values |= {"training_job_cluster_storage": {}}
    values |= overrides
    if "training_job_name" not in overrides:
        values["training_job_name"] = f"{testcase.replace('/', '-')}-{values['training_job_nodes']}n"
    return values


def manifest(testcase: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "testcases" / testcase / "testcase.yml").read_text())


def computed(case: dict[str, Any]) -> dict[str, Any]:
    """What the plan gives for one golden case, in the golden's shape."""
    req = request(case["testcase"], **case["overrides"])
    image = GOLDEN["image_infos"][case["image"]]
    instance = instance_entry(req["training_job_instance_type"])
    node = case.get("node", GOLDEN_NODE)
    the_plan = plan.launch_plan(
        req, manifest(case["testcase"]), CATALOG, instance, image, GOLDEN_TMPDIR, node
    )
    out = {key: the_plan[key] for key in case["plan"] if key in the_plan and key != "venv_key"}
    out["input_failed"] = plan.input_problems(req, catalog().names())
    out["request_failed"] = plan.request_problems(req, manifest(case["testcase"]), CATALOG, instance, node)
    if image is not None:
        out["image_failed"] = plan.image_problems(req, image, instance)
    return out


def normal(value: Any) -> Any:
    """Paths with the checkout as <repo>, virtualenv keys as <key>: `make testcase-locks` changes the keys,
    and test_the_virtualenv_is_named_by_the_lock_and_the_interpreter checks how they are made."""
    text = json.dumps(value, sort_keys=True).replace(str(REPO), "<repo>")
    return json.loads(VENV_KEY.sub("<key>", text))


def case_id(case: dict[str, Any]) -> str:
    over = case["overrides"]
    return "-".join(
        str(part)
        for part in (
            case["testcase"],
            over.get("training_job_launcher", "slurm"),
            over.get("training_job_instance_type") or "none",
            "venv" if over.get("training_job_venv", True) else "novenv",
            case["image"],
            len(json.dumps(over, sort_keys=True)),
        )
    )


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=[case_id(c) for c in GOLDEN["cases"]])
def test_the_plan_matches_the_golden(case: dict[str, Any]) -> None:
    expected = {key: value for key, value in case["plan"].items() if key != "venv_key"}
    assert normal(computed(case)) == normal(expected)


def test_the_golden_covers_every_test_case_and_launcher() -> None:
    seen = {(c["testcase"], c["overrides"].get("training_job_launcher")) for c in GOLDEN["cases"]}
    for testcase in catalog_testcases(CATALOG):
        for launcher in plan.LAUNCHERS:
            assert (testcase, launcher) in seen, (testcase, launcher)


def test_the_virtualenv_is_named_by_the_lock_and_the_interpreter() -> None:
    req = request("pytorch/ddp")
    lock = (REPO / "testcases" / "pytorch" / "ddp" / "requirements.lock").read_text()
    key = hashlib.sha256((lock + "/usr/bin/python3").encode()).hexdigest()[:16]
    the_plan = plan.launch_plan(req, manifest("pytorch/ddp"), CATALOG, {})
    assert the_plan["venv_dir"] == f"/fsx/trainstack/venvs/pytorch-ddp-{key}"
    other = plan.launch_plan(
        request("pytorch/ddp", training_job_python="/opt/py/bin/python3"), {}, CATALOG, {}
    )
    assert other["venv_key"] != key


def test_a_valid_request_is_planned() -> None:
    refusal, found = refusals(request(), CATALOG, known_variables(SPECS))
    assert refusal == "" and found == manifest("pytorch/fsdp")


def test_an_unknown_variable_is_refused_with_close_matches() -> None:
    refusal, found = refusals(request(training_job_nodez=2), CATALOG, known_variables(SPECS))
    assert found is None
    assert refusal == (
        "Unknown variable(s): training_job_nodez (close: training_job_nodes, training_job_node_os, "
        "training_job_nodelist). The "
        "role's "
        "variables are listed in its README. Nothing was submitted."
    )


def test_an_unknown_test_case_lists_the_catalog() -> None:
    refusal, _manifest = refusals(request("pytorch/nope"), CATALOG, known_variables(SPECS))
    known = "Known: data/prepare, deepspeed/zero3, hf/finetune"
    assert refusal.startswith(f"Unknown test case 'pytorch/nope'. {known}")
    refusal, _manifest = refusals(request(""), CATALOG, known_variables(SPECS))
    assert "(training_job_testcase is required)" in refusal


def test_every_broken_input_is_named_in_one_refusal() -> None:
    refusal, _manifest = refusals(
        request(training_job_nodes=0, training_job_partition="a b"), CATALOG, known_variables(SPECS)
    )
    assert "training_job_nodes must be >= 1 (got 0)." in refusal
    assert "training_job_partition 'a b'" in refusal
    assert refusal.endswith("Nothing was submitted.")


def test_request_problems_say_which_test_case() -> None:
    refusal, _manifest = refusals(
        request(training_job_args={"config": "huge"}), CATALOG, known_variables(SPECS)
    )
    assert refusal.startswith("Cannot launch pytorch/fsdp: Unknown config huge for pytorch/fsdp")


@pytest.mark.parametrize("include", [["../etc"], ["pytorch/fsdp/missing"], ["/abs/path"], ["pytorch/./fsdp"]])
def test_an_include_outside_the_catalog_is_refused(include: list[str]) -> None:
    bad = {**manifest("torchtitan/llama"), "include": include}
    (message,) = plan.request_problems(request("torchtitan/llama"), bad, CATALOG, {})
    assert "must list directories under testcases/" in message


def test_numbers_given_as_strings_plan_the_same() -> None:
    as_text = plan.launch_plan(
        request(training_job_nodes="2", training_job_procs_per_node="4"), {}, CATALOG, {}
    )
    assert as_text["world_size"] == 8
    assert plan.input_problems(request(training_job_nodes="x"), []) == [
        "training_job_nodes must be >= 1 (got x)."
    ]


def test_close_matches_rank_best_first_and_keep_three() -> None:
    options = ["batch-size", "batch-sizes", "batch-sized", "batch-sizer", "seq-len", "steps"]
    assert (
        close_matches(["batch_size"], options) == "batch_size (close: batch-size, batch-sized, batch-sizer)"
    )
    assert close_matches(["step"], options) == "step (close: steps)"
    assert close_matches(["zzz"], options) == "zzz (no close match)"


def test_entrypoint_options_are_read_from_help() -> None:
    text = "usage: train.py [--steps STEPS] [--batch-size N]\n  --steps  steps\n  foo--bar --x-y"
    assert plan.entrypoint_options(text) == ["steps", "batch-size", "x-y"]


def test_the_plan_is_what_the_role_uses(tmp_path: Path) -> None:
    """Each plan field the role's tasks and templates read exists in the plan (a rename would break a "
    "launch)."""
    the_plan = plan.launch_plan(request(), manifest("pytorch/fsdp"), CATALOG, {})
    used: set[str] = set()
    for path in [*(ROLE / "tasks").glob("*.yml"), *(ROLE / "templates").glob("*.j2")]:
        used |= set(re.findall(r"__training_job_plan\.([a-z0-9_]+)", path.read_text()))
    assert used and used <= set(the_plan), used - set(the_plan)
