"""Bad input at every entry point a user meets, as a table: each refused clearly, none accepted, none a crash.

Every row feeds one bad value to the code an entry point runs first (the cluster spec's loader, the stack,
rules and instance catalog loaders, the foundation role's checks, the slurm_job and artifact modules, the
launch plan's refusals) and classifies what happened:

- ``clear``: the entry point's own error, whose message names the key (the row's fragment);
- ``silent``: accepted;
- ``crash``: any other exception (a KeyError, a TypeError, a traceback a user would have to read).

Only ``clear`` passes. ``python -m pytest tests/unit/test_bad_inputs.py -q -rA`` lists every row by entry
point (the id's first word), which is the table a release note or review quotes.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

from tests.support import CURRENT_STACK_FILE, REPO
from tests.support.roles import assert_task_failure, init_ansible_plugins, role_data_templar

init_ansible_plugins()
# The collection's code, through the loader just pointed at this checkout.
from ansible_collections.trainstack.cluster.plugins.action.training_job_plan import (  # noqa: E402
    known_variables,
    refusals,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.catalog import instance_catalog  # noqa: E402
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import cluster_spec  # noqa: E402
from ansible_collections.trainstack.cluster.plugins.module_utils.files import strict_yaml  # noqa: E402
from ansible_collections.trainstack.cluster.plugins.module_utils.stack import stack_matrix  # noqa: E402
from ansible_collections.trainstack.cluster.plugins.modules import artifact, slurm_job  # noqa: E402

SPEC = yaml.safe_load((REPO / "inventories" / "aws" / "clusters" / "g6e.yml").read_text())
STACK = yaml.safe_load(CURRENT_STACK_FILE.read_text())
RULES = yaml.safe_load((REPO / "stacks" / "rules.yml").read_text())["rules"]
CATALOG = yaml.safe_load((REPO / "stacks" / "instance_types.yml").read_text())
ROLE = REPO / "roles" / "training_job"
TESTCASES = f"{ROLE}/../../testcases"
KNOWN = known_variables(str(ROLE / "meta" / "argument_specs.yml"))


def outcome(call: Callable[[], str | None], errors: tuple[type[BaseException], ...], fragment: str) -> str:
    """'clear', 'silent' or 'crash: ...' for one call that returns its refusal (or None) or raises."""
    try:
        message = call()
    except errors as error:
        message = str(error)
    except Exception as error:  # anything else is what the table counts as a crash
        return f"crash: {type(error).__name__}: {error}"
    if not message:
        return "silent"
    return "clear" if fragment in message else f"unclear: {message}"


def edited(base: Any, path: str, value: Any) -> Any:
    """A deep copy of base with the dotted path set (``a.0.b``); the value ``DELETE`` removes the key."""
    out = copy.deepcopy(base)
    *parents, last = path.split(".")
    node = out
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key: Any = int(last) if isinstance(node, list) else last
    if value == "DELETE":
        del node[key]
    else:
        node[key] = value
    return out


# -- cluster spec: the loader every cluster playbook and `cluster_spec` run first
SPEC_CASES = [
    ("name-uppercase", "name", "Tune-G6E", "name"),
    ("name-too-long", "name", "a" * 70, "name"),
    ("name-empty", "name", "", "name"),
    ("name-missing", "name", "DELETE", "name"),
    ("region-typo", "region", "eu-wset-1", "region"),
    ("region-number", "region", 7, "region"),
    ("zone-other-region", "availability_zone", "us-east-1a", "availability_zone"),
    ("network-vpc-unknown", "network.vpc", "maybe", "network"),
    ("network-unknown-key", "network.vcp", "new", "vcp"),
    ("head-type-typo", "head_node.instance_type", "m7i.xlargee", "head_node"),
    ("head-unknown-key", "head_node.instance_typ", "m7i.xlarge", "instance_typ"),
    ("login-type-typo", "login_nodes.instance_type", "m7.large", "login_nodes"),
    ("queue-type-typo", "queues.0.instance_type", "g6e.48xlarg", "queues"),
    ("queue-name-bad", "queues.0.name", "L40S queue", "queues"),
    ("queue-count-negative", "queues.0.max_count", -1, "max_count"),
    ("queue-count-string", "queues.0.max_count", "six", "max_count"),
    ("queue-count-huge", "queues.0.max_count", 10**7, "max_count"),
    ("queue-capacity-unknown", "queues.0.capacity_type", "cheap", "capacity_type"),
    ("queues-empty", "queues", [], "queues"),
    ("queue-unknown-key", "queues.0.max_cont", 2, "max_cont"),
    ("queue-name-reserved", "queues.0.name", "default", "queues"),
    (
        "queues-too-many",
        "queues",
        [{"name": f"q{i:03d}", "instance_type": "g6e.48xlarge", "max_count": 1} for i in range(51)],
        "queues",
    ),
    ("name-longer-than-foundation-takes", "name", "a" * 33, "name"),
    ("fsx-type-unknown", "shared_storage.fsx_lustre.deployment_type", "SCRATCH_9", "deployment_type"),
    ("fsx-capacity-step", "shared_storage.fsx_lustre.storage_capacity_gib", 1000, "storage_capacity"),
    ("image-stack-unknown", "image.stack", "ts-1999.01", "stack"),
    ("image-os-unknown", "image.os", "windows", "os"),
    ("monitoring-string", "monitoring", "sometimes", "monitoring"),
    ("top-level-unknown", "colour", "blue", "colour"),
]


@pytest.mark.parametrize(
    ("path", "value", "fragment"), [pytest.param(*c[1:], id=f"spec-{c[0]}") for c in SPEC_CASES]
)
def test_cluster_spec(tmp_path: Path, path: str, value: Any, fragment: str) -> None:
    spec_file = tmp_path / "spec.yml"
    spec_file.write_text(yaml.safe_dump(edited(SPEC, path, value)))
    assert (
        outcome(
            lambda: (cluster_spec.load_file(spec_file), None)[1], (cluster_spec.ClusterSpecError,), fragment
        )
        == "clear"
    )


SPEC_TEXT_CASES = [
    ("duplicate-key", "name: a-b\nname: c-d\n", "name"),
    ("two-documents", "name: a-b\n---\nname: c-d\n", "one YAML document"),
    ("not-yaml", "name: [a-b\n", "not YAML"),
    ("a-list", "- name: a-b\n", "must be object"),
]


@pytest.mark.parametrize(
    ("text", "fragment"), [pytest.param(*c[1:], id=f"spec-{c[0]}") for c in SPEC_TEXT_CASES]
)
def test_cluster_spec_text(tmp_path: Path, text: str, fragment: str) -> None:
    spec_file = tmp_path / "spec.yml"
    spec_file.write_text(text)
    assert (
        outcome(
            lambda: (cluster_spec.load_file(spec_file), None)[1], (cluster_spec.ClusterSpecError,), fragment
        )
        == "clear"
    )


# -- stack files: what check_stack, every image build and every cluster playbook load
STACK_CASES = [
    ("id-missing", "id", "DELETE", "id"),
    ("status-unknown", "status", "shiny", "status"),
    ("scope-os-empty", "scope.os", [], "scope.os"),
    ("scope-arch-unknown", "scope.arch", ["x86_64", "riscv"], "scope.arch"),
    ("lab-os-not-scoped", "scope.lab_os", ["debian-13"], "lab_os"),
    ("unknown-top-key", "sourcez", [], "sourcez"),
    ("components-null", "components", None, "components"),
    ("component-unknown-key", "components.nccl.versoin", "2.29.7", "versoin"),
    ("component-version-number", "components.nccl.version", 2.29, "components.nccl.version"),
    ("component-os-unknown", "components.nccl.os", ["plan9"], "components.nccl.os"),
    ("released-not-date", "released", "soon", "released"),
]


@pytest.mark.parametrize(
    ("path", "value", "fragment"), [pytest.param(*c[1:], id=f"stack-{c[0]}") for c in STACK_CASES]
)
def test_stack_file(path: str, value: Any, fragment: str) -> None:
    bad = edited(STACK, path, value)
    errors = (stack_matrix.StackError,)
    assert outcome(lambda: stack_matrix.validate_stack(bad, "stack"), errors, fragment) == "clear"


YAML_TEXT_CASES = [
    ("stack-duplicate-key", "id: a\nstatus: current\nid: b\n", "id"),
    ("stack-duplicate-nested", "components:\n  nccl: {version: '1'}\n  nccl: {version: '2'}\n", "nccl"),
    ("rules-duplicate-key", "rules:\n  - id: a\n    id: b\n", "id"),
    ("manifest-duplicate-key", "name: fsdp\nlaunchers: [slurm]\nlaunchers: [local]\n", "launchers"),
    ("catalog-duplicate-type", "types:\n  p5.48xlarge: {}\n  p5.48xlarge: {}\n", "p5.48xlarge"),
]


@pytest.mark.parametrize(
    ("text", "fragment"), [pytest.param(*c[1:], id=f"yaml-{c[0]}") for c in YAML_TEXT_CASES]
)
def test_strict_loader(text: str, fragment: str) -> None:
    assert (
        outcome(lambda: strict_yaml.loads(text, "file.yml") and None, (yaml.YAMLError,), fragment) == "clear"
    )


def rule(rule_id: str) -> dict[str, Any]:
    return copy.deepcopy(next(r for r in RULES if r["id"] == rule_id))


RULE_CASES = [
    ("families-typo", "p5-minimums", "familes", ["p5"], "familes"),
    ("cuda-field-typo", "cuda-driver-minimum", "cuda_field", ["cuda.version"], "cuda_field"),
    ("kind-unknown", "p5-minimums", "kind", "family_maximum", "kind"),
    ("id-missing", "p5-minimums", "id", "DELETE", "id"),
    ("citation-missing", "p5-minimums", "citation", "DELETE", "citation"),
    ("when-op-unknown", "efa-cuda-sync-memops", "when", [{"field": "nccl.version", "gte": "2.19.0"}], "gte"),
    ("minimum-not-mapping", "p5-minimums", "minimum", "12.0", "minimum"),
    ("description-number", "p5-minimums", "description", 5, "description"),
]


@pytest.mark.parametrize(
    ("rule_id", "key", "value", "fragment"), [pytest.param(*c[1:], id=f"rules-{c[0]}") for c in RULE_CASES]
)
def test_rules_file(rule_id: str, key: str, value: Any, fragment: str) -> None:
    bad = [r for r in RULES if r["id"] != rule_id] + [edited(rule(rule_id), key, value)]
    assert outcome(lambda: stack_matrix.validate_rules(bad), (stack_matrix.StackError,), fragment) == "clear"


def catalog_with(name: str, key: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(CATALOG)
    entry = next(iter(out["types"].values())) if name == "first" else out["types"][name]
    if value == "DELETE":
        del entry[key]
    else:
        entry[key] = value
    return out


CATALOG_CASES = [
    ("gpus-negative", "gpus", -8, "gpus"),
    ("gpus-string", "gpus", "eight", "gpus"),
    ("unknown-key", "gpu_cnt", 8, "gpu_cnt"),
    ("efa-string", "efa_interfaces", "lots", "efa_interfaces"),
]


@pytest.mark.parametrize(
    ("key", "value", "fragment"), [pytest.param(*c[1:], id=f"catalog-{c[0]}") for c in CATALOG_CASES]
)
def test_instance_catalog(key: str, value: Any, fragment: str) -> None:
    bad = catalog_with("first", key, value)
    assert (
        outcome(lambda: instance_catalog.validate(bad), (instance_catalog.CatalogError,), fragment) == "clear"
    )


# -- the foundation role: its checks run on the controller before any AWS call
FOUNDATION = {
    "aws_foundation_cluster_name": "demo",
    "aws_foundation_region": "us-east-1",
    "aws_foundation_availability_zone": "us-east-1a",
}
FOUNDATION_CASES = [
    ("name-uppercase", {"aws_foundation_cluster_name": "Demo"}, "aws_foundation_cluster_name"),
    ("name-underscore", {"aws_foundation_cluster_name": "my_cluster"}, "aws_foundation_cluster_name"),
    ("name-too-long", {"aws_foundation_cluster_name": "a" * 40}, "aws_foundation_cluster_name"),
    ("name-trailing-dash", {"aws_foundation_cluster_name": "demo-"}, "aws_foundation_cluster_name"),
    ("orchestrator-unknown", {"aws_foundation_orchestrator": "nomad"}, "aws_foundation_orchestrator"),
    ("region-typo", {"aws_foundation_region": "us-esat-1"}, "aws_foundation_region"),
    (
        "zone-other-region",
        {"aws_foundation_availability_zone": "eu-west-1a"},
        "aws_foundation_availability_zone",
    ),
    ("bucket-uppercase", {"aws_foundation_bucket_name": "My-Bucket"}, "aws_foundation_bucket_name"),
    ("bucket-ip-like", {"aws_foundation_bucket_name": "192.168.1.1"}, "aws_foundation_bucket_name"),
    ("bucket-too-short", {"aws_foundation_bucket_name": "ab"}, "aws_foundation_bucket_name"),
    ("bucket-reserved-prefix", {"aws_foundation_bucket_name": "xn--data"}, "aws_foundation_bucket_name"),
    ("bucket-reserved-suffix", {"aws_foundation_bucket_name": "data-s3alias"}, "aws_foundation_bucket_name"),
    ("bucket-dot-dash", {"aws_foundation_bucket_name": "data.-set"}, "aws_foundation_bucket_name"),
    (
        "lifecycle-bucket-uppercase",
        {"aws_foundation_orchestrator": "hyperpod", "aws_foundation_hyperpod_lifecycle_bucket": "Life"},
        "aws_foundation_hyperpod_lifecycle_bucket",
    ),
]


def applies(templar: Any, task: dict[str, Any]) -> bool:
    """The task's `when`, evaluated as Ansible would (every condition of a list must hold)."""
    from ansible.template import trust_as_template

    conditions = task.get("when", [])
    conditions = conditions if isinstance(conditions, list) else [conditions]
    return all(templar.evaluate_conditional(trust_as_template(str(c))) for c in conditions)


def foundation_refusal(templar: Any) -> str | None:
    """The first failing check among validate.yml's top-level asserts (the CIDR checks loop over parsed facts
    and are covered by the role's own tests)."""
    tasks = yaml.safe_load((REPO / "roles" / "aws_foundation" / "tasks" / "validate.yml").read_text())
    for task in tasks:
        if "ansible.builtin.assert" in task and "loop" not in task and applies(templar, task):
            message = assert_task_failure(templar, task)
            if message is not None:
                return message
    return None


@pytest.mark.parametrize(
    ("variables", "fragment"), [pytest.param(*c[1:], id=f"foundation-{c[0]}") for c in FOUNDATION_CASES]
)
def test_foundation(variables: dict[str, Any], fragment: str) -> None:
    templar = role_data_templar("aws_foundation", **{**FOUNDATION, **variables})
    assert outcome(lambda: foundation_refusal(templar), (), fragment) == "clear"


# -- slurm_job: the module every launch and acceptance test submits through
def module_failure(module: Any, capsys: pytest.CaptureFixture[str], args: dict[str, Any]) -> str | None:
    """The module's failure message for these arguments (None when it would have gone on to act)."""
    capsys.readouterr()
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    result = json.loads(capsys.readouterr().out)
    return result.get("msg") if result.get("failed") else None


SLURM_JOB_CASES = [
    ("poll-too-fast", {"name": "j", "script": "/x.sbatch", "poll_interval": 0.001}, "poll_interval"),
    ("poll-zero", {"name": "j", "script": "/x.sbatch", "poll_interval": 0}, "poll_interval"),
    ("timeout-zero", {"name": "j", "script": "/x.sbatch", "timeout": 0}, "timeout"),
    ("progress-negative", {"name": "j", "script": "/x.sbatch", "progress_interval": -5}, "progress_interval"),
    ("state-unknown", {"name": "j", "script": "/x.sbatch", "state": "running"}, "state"),
    ("present-without-script", {"name": "j"}, "script"),
    ("neither-name-nor-id", {"state": "query"}, "name"),
    ("job-id-not-number", {"job_id": "12; rm -rf /", "state": "query"}, "job_id"),
    ("job-id-with-present", {"job_id": "12", "name": "j", "script": "/x.sbatch"}, "job_id"),
    ("timeout-string", {"name": "j", "script": "/x.sbatch", "timeout": "soon"}, "timeout"),
    ("unknown-option", {"name": "j", "script": "/x.sbatch", "pol_interval": 5}, "pol_interval"),
    ("force-string", {"name": "j", "script": "/x.sbatch", "force": "perhaps"}, "force"),
]


@pytest.mark.parametrize(
    ("args", "fragment"), [pytest.param(*c[1:], id=f"slurm_job-{c[0]}") for c in SLURM_JOB_CASES]
)
def test_slurm_job(capsys: pytest.CaptureFixture[str], args: dict[str, Any], fragment: str) -> None:
    assert outcome(lambda: module_failure(slurm_job, capsys, args), (), fragment) == "clear"


# -- artifact: every download the roles make
def artifact_args(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    return {
        "name": "nccl",
        "url": "https://example.invalid/nccl.tgz",
        "dest": str(tmp_path / "out"),
        **overrides,
    }


ARTIFACT_CASES = [
    ("sha-short", {"sha256": "abc123"}, "sha256"),
    ("sha-not-hex", {"sha256": "z" * 64}, "sha256"),
    ("url-ftp", {"url": "ftp://example.invalid/x"}, "url"),
    ("url-plain-http", {"url": "http://example.invalid/x"}, "url"),
    ("url-relative", {"url": "nccl.tgz"}, "url"),
    ("unverified-no-reason", {"verify": False}, "unverified_reason"),
    ("unverified-blank-reason", {"verify": False, "unverified_reason": "  "}, "unverified_reason"),
    ("record-without-lock", {"record_lock": True}, "record_lock"),
    ("timeout-string", {"timeout": "long"}, "timeout"),
    ("unknown-option", {"sha265": "0" * 64}, "sha265"),
    ("dest-missing", {"dest": None}, "dest"),
]


@pytest.mark.parametrize(
    ("overrides", "fragment"), [pytest.param(*c[1:], id=f"artifact-{c[0]}") for c in ARTIFACT_CASES]
)
def test_artifact(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], overrides: dict[str, Any], fragment: str
) -> None:
    args = {k: v for k, v in artifact_args(tmp_path, **overrides).items() if v is not None}
    assert outcome(lambda: module_failure(artifact, capsys, args), (), fragment) == "clear"
    assert not (tmp_path / "out").exists()


# -- launch_training: the plan's refusals, before anything is staged
def launch_request(**overrides: Any) -> dict[str, Any]:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    values = {**defaults, "training_job_testcase": "pytorch/fsdp", "training_job_shared_dir": "/fsx"}
    values |= {
        "training_job_results_dir": "/results",
        "training_job_pip_env": {},
        "training_job_name": "run-1",
    }
    return values | overrides


LAUNCH_CASES = [
    ("testcase-unknown", {"training_job_testcase": "pytorch/fsdpp"}, "Unknown test case 'pytorch/fsdpp'"),
    ("testcase-traversal", {"training_job_testcase": "../../etc"}, "Unknown test case '../../etc'"),
    ("launcher-unknown", {"training_job_launcher": "mpirun"}, "cannot run with the mpirun launcher"),
    ("nodes-zero", {"training_job_nodes": 0}, "training_job_nodes"),
    ("nodes-string", {"training_job_nodes": "two"}, "training_job_nodes"),
    ("name-with-space", {"training_job_name": "my run"}, "training_job_name"),
    ("name-with-pipe", {"training_job_name": "a|b"}, "training_job_name"),
    ("shared-dir-relative", {"training_job_shared_dir": "fsx"}, "training_job_shared_dir"),
    ("shared-dir-root", {"training_job_shared_dir": "/"}, "training_job_shared_dir"),
    ("shared-dir-dotdot", {"training_job_shared_dir": "/fsx/../etc"}, "training_job_shared_dir"),
    ("results-dir-relative", {"training_job_results_dir": "results"}, "training_job_results_dir"),
    ("env-name-bad", {"training_job_env": {"1BAD": "x"}}, "training_job_env"),
    ("arg-name-bad", {"training_job_args": {"Bad Option": 1}}, "training_job_args"),
    ("variable-typo", {"training_job_node": 2}, "training_job_node"),
    ("instance-type-typo", {"training_job_instance_type": "p5.48xlarg"}, "training_job_instance_type"),
    ("partition-bad", {"training_job_partition": "gpu;rm"}, "training_job_partition"),
    ("image-ref-bad", {"training_job_container_image": "reg istry/img"}, "training_job_container_image"),
    (
        "nsys-args-bad",
        {"training_job_nsys_ranks": [0], "training_job_nsys_args": "--output=$(id)"},
        "training_job_nsys_args",
    ),
    ("nsys-rank-negative", {"training_job_nsys_ranks": [-1]}, "training_job_nsys_ranks"),
    ("timeout-zero", {"training_job_timeout": 0}, "training_job_timeout"),
    ("checkpoint-every-negative", {"training_job_checkpoint_every": -3}, "training_job_checkpoint_every"),
    ("procs-per-node-zero", {"training_job_procs_per_node": 0}, "training_job_procs_per_node"),
    ("nodelist-bad", {"training_job_nodelist": ["node[1-2];id"]}, "training_job_nodelist"),
    ("port-out-of-range", {"training_job_rdzv_port": 70000}, "training_job_rdzv_port"),
]


@pytest.mark.parametrize(
    ("overrides", "fragment"), [pytest.param(*c[1:], id=f"launch-{c[0]}") for c in LAUNCH_CASES]
)
def test_launch_training(overrides: dict[str, Any], fragment: str) -> None:
    # Each row breaks a rule of a variable the role knows (but the typo row): the refusal is that rule's.
    assert fragment == "training_job_node" or set(overrides) <= set(KNOWN)
    request = launch_request(**overrides)
    assert outcome(lambda: refusals(request, TESTCASES, KNOWN)[0], (), fragment) == "clear"
