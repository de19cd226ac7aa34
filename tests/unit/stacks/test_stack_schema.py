"""The stack schema (module_utils/stack/stack_schema.py, published as stacks/schema/stack.schema.json).

Each refusal must name the file and the dotted path of the key, and the checker must apply the schema before
any rule: a misspelt key used to be ignored and the stack silently lost that pin.
"""

import json
import re

import jsonschema
import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.stack import stack_matrix as sm
from ansible_collections.trainstack.cluster.plugins.module_utils.stack import stack_schema

from tests.support import CURRENT_STACK_FILE, REPO

SCHEMA_FILE = REPO / "stacks" / "schema" / "stack.schema.json"
SOURCE = CURRENT_STACK_FILE.relative_to(REPO).as_posix()  # the current stack's file


def refusal(stack) -> str:
    with pytest.raises(sm.StackError) as err:
        sm.validate_stack(stack, SOURCE)
    return str(err.value)


def test_published_schema_is_the_one_the_checker_applies():
    """One schema: the JSON file reviewers and editors read is exactly what the modules apply."""
    published = json.loads(SCHEMA_FILE.read_text())
    assert published == stack_schema.SCHEMA, (
        "stacks/schema/stack.schema.json differs from module_utils/stack/stack_schema.py SCHEMA; rewrite it "
        "with json.dumps(SCHEMA, indent=2)"
    )
    jsonschema.Draft202012Validator.check_schema(published)


def test_shipped_stacks_conform(stack_file):
    data = yaml.safe_load(stack_file.read_text())
    assert stack_schema.problems(data) == []
    assert list(jsonschema.Draft202012Validator(stack_schema.SCHEMA).iter_errors(data)) == []


def test_unknown_key_is_refused_with_file_and_path(current_stack):
    current_stack["components"]["cuda"]["mirror"] = "https://example.invalid/"
    assert f"{SOURCE}: components.cuda.mirror: unknown key" in refusal(current_stack)


def test_misspelt_key_is_refused_with_a_suggestion(current_stack):
    comp = current_stack["components"]["efa_installer"]
    comp["verison"] = comp.pop("version")
    message = refusal(current_stack)
    assert f"{SOURCE}: components.efa_installer.verison: unknown key (did you mean 'version'?)" in message
    assert f"{SOURCE}: components.efa_installer.version: is required" in message


def test_misspelt_artifact_key_is_refused(current_stack):
    art = current_stack["components"]["pytorch"]["artifacts"][0]
    art["sha265"] = art.pop("sha256")
    message = refusal(current_stack)
    assert (
        f"{SOURCE}: components.pytorch.artifacts[0].sha265: unknown key (did you mean 'sha256'?)" in message
    )


def test_misspelt_top_level_key_is_refused(current_stack):
    current_stack["enviroment"] = current_stack.pop("environment")
    assert f"{SOURCE}: enviroment: unknown key (did you mean 'environment'?)" in refusal(current_stack)


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("components", "nccl", "version"), 2.29, "components.nccl.version: must be string, not float"),
        (
            ("components", "nccl", "cuda_major"),
            "13",
            "components.nccl.cuda_major: must be integer, not a string",
        ),
        (("scope", "arch"), "x86_64", "scope.arch: must be array, not a string"),
        (("checksums_complete",), "no", "checksums_complete: must be boolean, not a string"),
    ],
)
def test_wrong_type_is_refused_with_file_and_path(current_stack, path, value, expected):
    node = current_stack
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    assert f"{SOURCE}: {expected}" in refusal(current_stack)


@pytest.mark.parametrize(
    "path",
    [("scope",), ("environment",), ("components", "slurm", "artifacts"), ("components", "slurm", "by_os")],
)
def test_null_section_is_refused_with_file_and_path(current_stack, path):
    """`artifacts:` with nothing under it is YAML null: it used to read as 'no downloads'."""
    node = current_stack
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = None
    assert re.search(
        rf"{re.escape(SOURCE)}: {re.escape('.'.join(path))}: must be \w+, not null", refusal(current_stack)
    )


def test_schema_runs_before_any_rule(current_stack, rules):
    """A stack that would also break a rule is refused for its shape first: rules never see a bad stack."""
    current_stack["components"]["nvidia_driver"]["version"] = "470.0"
    current_stack["components"]["nvidia_driver"]["kernel_module"] = "open"
    with pytest.raises(sm.StackError, match=r"components\.nvidia_driver\.kernel_module: unknown key"):
        sm.check(current_stack, rules, source=SOURCE)


def test_filters_see_only_valid_stacks(current_stack):
    """resolve() (behind every stack filter) applies the schema too, not only the checker."""
    current_stack["components"]["cuda"]["pakages"] = ["cuda-toolkit-13-2"]
    with pytest.raises(sm.StackError, match=r"components\.cuda\.pakages: unknown key"):
        sm.resolve(current_stack, "ubuntu-24.04", "x86_64")


def test_unverified_artifact_needs_a_reason_and_no_digest(current_stack):
    art = current_stack["components"]["efa_installer"]["artifacts"][0]
    art["verify"] = False
    assert "components.efa_installer.artifacts[0].unverified_reason: is required" in refusal(current_stack)
    art["unverified_reason"] = "AWS publishes no checksum for the installer tarball"
    sm.validate_stack(current_stack, SOURCE)
    art["sha256"] = "a" * 64
    assert "components.efa_installer.artifacts[0].sha256: must be null" in refusal(current_stack)


def test_http_artifact_needs_allow_http(current_stack):
    art = current_stack["components"]["efa_installer"]["artifacts"][0]
    art["url"] = art["url"].replace("https://", "http://")
    assert "components.efa_installer.artifacts[0].allow_http: is required" in refusal(current_stack)
    art["allow_http"] = True
    sm.validate_stack(current_stack, SOURCE)


def test_the_validator_agrees_with_jsonschema(current_stack):
    """Where ours refuses, the reference implementation refuses too (and the other way round)."""
    reference = jsonschema.Draft202012Validator(stack_schema.SCHEMA)
    samples = []
    for mutate in (
        lambda s: s["components"]["cuda"].update(verison="1"),
        lambda s: s.update(scope=None),
        lambda s: s["components"]["nccl"].update(cuda_major="13"),
        lambda s: s["components"]["efa_installer"]["artifacts"][0].update(verify=False),
        lambda s: s["components"]["efa_installer"]["artifacts"][0].update(url="http://e.invalid/x.tgz"),
        lambda s: None,
    ):
        sample = yaml.safe_load(yaml.safe_dump(current_stack))
        mutate(sample)
        samples.append(sample)
    for sample in samples:
        assert bool(stack_schema.problems(sample)) == (not reference.is_valid(sample))


def test_validator_refuses_keywords_it_does_not_implement():
    with pytest.raises(ValueError, match="lacks"):
        stack_schema.problems({}, {"type": "object", "oneOf": []})


def test_resolved_components_are_copies_not_views(current_stack):
    """resolve() copies (plainly, not with deepcopy: see plain_copy); a caller changing what it got back must
    not change the stack that the next caller resolves."""
    resolved = sm.resolve(current_stack, "ubuntu-22.04", "x86_64")
    name, component = next((n, c) for n, c in resolved.items() if c.get("artifacts"))
    component["artifacts"][0]["url"] = "changed"
    component["os"].append("changed")
    again = sm.resolve(current_stack, "ubuntu-22.04", "x86_64")[name]
    assert again["artifacts"][0]["url"] != "changed" and "changed" not in again["os"]
