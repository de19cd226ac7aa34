"""One loader for the product's YAML files refuses a key given twice, at any depth, in every file it reads:
stacks, the compatibility rules, the instance catalog, cluster specs and test case manifests. Each error
names the key, both lines and the file; a file without repeats loads exactly as PyYAML's safe loader reads it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import cluster_spec
from ansible_collections.trainstack.cluster.plugins.module_utils.files import strict_yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.stack import stack_resolver
from ansible_collections.trainstack.cluster.plugins.module_utils.stack.stack_matrix import StackError

from tests.support import REPO

NESTED = """\
cluster:
  name: llm-a
  region: us-east-1
queues:
  - name: gpu
    instance_type: p5.48xlarge
    count: 2
    instance_type: p4d.24xlarge
"""


def test_a_repeated_key_is_refused_with_the_key_both_lines_and_the_file() -> None:
    with pytest.raises(yaml.YAMLError) as err:
        strict_yaml.loads(NESTED, "spec.yml")
    text = str(err.value)
    assert "key 'instance_type' is given twice (first on line 6, again on line 8)" in text, text
    assert 'in "spec.yml", line 8' in text, text


def test_a_file_without_repeats_reads_as_the_safe_loader_reads_it() -> None:
    for path in [*REPO.glob("stacks/*.yml"), *REPO.glob("testcases/*/*/testcase.yml")]:
        text = path.read_text(encoding="utf-8")
        assert strict_yaml.loads(text, str(path)) == yaml.safe_load(text), path


def test_a_merge_key_may_be_overridden_but_written_keys_not_repeated() -> None:
    text = "base: &base {a: 1, b: 2}\nover:\n  <<: *base\n  a: 3\n"
    assert strict_yaml.loads(text) == {"base": {"a": 1, "b": 2}, "over": {"a": 3, "b": 2}}
    with pytest.raises(yaml.YAMLError, match="key 'a' is given twice"):
        strict_yaml.loads(text + "  a: 4\n")


def test_every_document_of_a_stream_is_checked() -> None:
    assert strict_yaml.loads_all("a: 1\n---\nb: 2\n") == [{"a": 1}, {"b": 2}]
    with pytest.raises(yaml.YAMLError, match="key 'b' is given twice"):
        strict_yaml.loads_all("a: 1\n---\nb: 2\nb: 3\n")


def test_a_stack_file_with_a_repeated_key_is_a_stack_error(tmp_path: Path) -> None:
    """The stack resolver (stack lookups, filters, stack_check) reports it as every malformed stack."""
    current = stack_resolver.current_stack_id(REPO / "stacks")
    shutil.copytree(REPO / "stacks", tmp_path / "stacks")
    path = tmp_path / "stacks" / f"{current}.yml"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("id:"))
    path.write_text("".join([*lines[: at + 1], lines[at], *lines[at + 1 :]]), encoding="utf-8")
    with pytest.raises(StackError, match=rf"{path}: not valid YAML: .*key 'id' is given twice"):
        stack_resolver.load_stack(tmp_path / "stacks", current)


def test_a_rules_file_with_a_repeated_key_is_a_stack_error(tmp_path: Path) -> None:
    shutil.copytree(REPO / "stacks", tmp_path / "stacks")
    path = tmp_path / "stacks" / "rules.yml"
    text = path.read_text(encoding="utf-8").replace(
        "    kind: driver_for_cuda\n", "    kind: driver_for_cuda\n" * 2
    )
    path.write_text(text, encoding="utf-8")
    with pytest.raises(StackError, match="key 'kind' is given twice"):
        stack_resolver.load_rules(tmp_path / "stacks")


def test_a_cluster_spec_with_a_repeated_key_is_refused_naming_the_file(tmp_path: Path) -> None:
    example = next(REPO.glob("inventories/aws/clusters/*.yml"))
    lines = example.read_text(encoding="utf-8").splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("name:"))
    path = tmp_path / "spec.yml"
    path.write_text("".join([*lines[: at + 1], "name: other\n", *lines[at + 1 :]]), encoding="utf-8")
    with pytest.raises(cluster_spec.ClusterSpecError) as err:
        cluster_spec.load_file(path)
    assert f"{path}: not YAML" in str(err.value) and "key 'name' is given twice" in str(err.value)


def test_a_test_case_manifest_with_a_repeated_key_is_named_by_batch(tmp_path: Path) -> None:
    from ansible_collections.trainstack.cluster.plugins.module_utils.cluster import batch_render

    case = tmp_path / "pytorch" / "fsdp"
    case.mkdir(parents=True)
    manifest = (REPO / "testcases" / "pytorch" / "fsdp" / "testcase.yml").read_text(encoding="utf-8")
    (case / "testcase.yml").write_text(manifest + "entrypoint: other.py\n", encoding="utf-8")
    found, problems = batch_render.load_test_case(tmp_path, "pytorch/fsdp")
    assert found is None and len(problems) == 1, problems
    assert "is not valid YAML" in problems[0] and "key 'entrypoint' is given twice" in problems[0], problems
