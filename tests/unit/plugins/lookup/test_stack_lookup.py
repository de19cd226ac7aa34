"""trainstack.cluster.stack: the one way roles read a stack; run through Ansible's own lookup loader."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleLookupError
from ansible.plugins.loader import lookup_loader
from ansible_collections.trainstack.cluster.plugins.module_utils.stack.stack_matrix import versions

from tests.support import CURRENT_STACK_ID, REPO

STACKS = REPO / "stacks"
CURRENT = CURRENT_STACK_ID
UBUNTU = {"distribution": "Ubuntu", "distribution_version": "22.04", "distribution_major_version": "22"}


def lookup(*terms: str, variables: dict[str, Any] | None = None, **options: Any) -> list[Any]:
    plugin = lookup_loader.get("trainstack.cluster.stack")
    assert plugin is not None, "the lookup is not found in this checkout's collection"
    return plugin.run(list(terms), variables=variables or {}, **options)


def host(**extra: Any) -> dict[str, Any]:
    return {"ansible_facts": {**UBUNTU, "architecture": "x86_64"}, **extra}


@pytest.fixture
def stacks(tmp_path: Path) -> Path:
    """A copy of the shipped stacks, to change one file without touching the checkout."""
    return Path(shutil.copytree(STACKS, tmp_path / "stacks"))


def _stack(stacks: Path) -> dict[str, Any]:
    return yaml.safe_load((stacks / f"{CURRENT}.yml").read_text())


def test_default_is_the_current_marker_and_pins_come_from_the_host_facts() -> None:
    shipped = _stack(STACKS)
    [cuda] = lookup("cuda", variables=host())
    assert cuda["version"] == str(shipped["components"]["cuda"]["version"])
    assert lookup(part="id", variables=host()) == [CURRENT]


def test_trainstack_stack_and_trainstack_os_select_stack_and_target() -> None:
    older = yaml.safe_load((STACKS / "ts-2025.12.yml").read_text())
    variables = host(trainstack_stack="ts-2025.12", trainstack_os="debian-12")
    assert lookup(part="versions", variables=variables) == [versions(older, "debian-12", "x86_64")]
    [slurm] = lookup("slurm", variables=variables)
    assert slurm["version"] == older["components"]["slurm"]["by_os"]["debian-12"]["version"]


def test_other_architectures_artifacts_are_dropped() -> None:
    [torch] = lookup("pytorch", variables=host(trainstack_arch="aarch64"))
    assert torch["artifacts"] and all(a["name"].endswith("aarch64") for a in torch["artifacts"])


def test_lock_digest_fills_a_missing_stack_digest_for_the_same_url(stacks: Path) -> None:
    data = _stack(stacks)
    wheel = next(a for a in data["components"]["pytorch"]["artifacts"] if a["name"] == "torch-cp310-x86_64")
    locked = wheel["sha256"]
    wheel["sha256"] = None
    (stacks / f"{CURRENT}.yml").write_text(yaml.safe_dump(data))
    [torch] = lookup("pytorch", variables=host(), stacks_dir=str(stacks))
    got = next(a for a in torch["artifacts"] if a["name"] == "torch-cp310-x86_64")
    assert (got["sha256"], got["sha256_from"]) == (locked, "lock")

    lock_path = stacks / "locks" / f"{CURRENT}.lock.json"
    lock = json.loads(lock_path.read_text())
    lock["artifacts"]["torch-cp310-x86_64"]["url"] += "?other"
    lock_path.write_text(json.dumps(lock))
    [torch] = lookup("pytorch", variables=host(), stacks_dir=str(stacks))
    got = next(a for a in torch["artifacts"] if a["name"] == "torch-cp310-x86_64")
    assert got["sha256"] is None and "sha256_from" not in got


def test_stack_digest_wins_over_the_lock(stacks: Path) -> None:
    lock_path = stacks / "locks" / f"{CURRENT}.lock.json"
    lock = json.loads(lock_path.read_text())
    lock["artifacts"]["torch-cp310-x86_64"]["sha256"] = "0" * 64
    lock_path.write_text(json.dumps(lock))
    [torch] = lookup("pytorch", variables=host(), stacks_dir=str(stacks))
    got = next(a for a in torch["artifacts"] if a["name"] == "torch-cp310-x86_64")
    assert got["sha256"] != "0" * 64 and "sha256_from" not in got


def test_component_not_pinned_for_the_host_is_empty() -> None:
    # The shipped stacks pin no NVIDIA driver for the Debian lab OS.
    assert lookup("nvidia_driver", variables=host(trainstack_os="debian-12")) == [{}]


def test_unknown_component_is_refused_naming_it() -> None:
    with pytest.raises(AnsibleLookupError, match=f"stack {CURRENT} has no component cudaa"):
        lookup("cudaa", variables=host())


def test_unknown_stack_is_refused_naming_the_available_ones() -> None:
    with pytest.raises(
        AnsibleLookupError, match=r"trainstack_stack=ts-1999\.01: no such stack .*ts-2025\.12"
    ):
        lookup("cuda", variables=host(trainstack_stack="ts-1999.01"))


def test_misspelt_stack_key_is_refused_naming_file_and_key(stacks: Path) -> None:
    path = stacks / f"{CURRENT}.yml"
    path.write_text(path.read_text().replace("    kernel_modules: open", "    kernel_module: open", 1))
    with pytest.raises(
        AnsibleLookupError, match=rf"{path}: components\.nvidia_driver\.kernel_module: unknown key"
    ):
        lookup(part="document", stacks_dir=str(stacks))


def test_missing_current_marker_is_an_error(stacks: Path) -> None:
    (stacks / "current").unlink()
    with pytest.raises(AnsibleLookupError, match="current stack marker"):
        lookup(part="id", stacks_dir=str(stacks))


def test_requirements_names_the_variant_lock_file() -> None:
    assert lookup("cpu", part="requirements") == [str(STACKS / "locks" / f"{CURRENT}.pytorch-cpu.txt")]
    with pytest.raises(AnsibleLookupError, match=r"variant '\.\./x'"):
        lookup("../x", part="requirements")


def test_parts_without_terms_refuse_terms() -> None:
    with pytest.raises(AnsibleLookupError, match="part=id takes no terms"):
        lookup("cuda", part="id")


def test_no_role_reads_the_stack_files_by_path() -> None:
    offenders = [
        str(p.relative_to(REPO))
        for p in (REPO / "roles").rglob("*.yml")
        if "../../stacks" in p.read_text() or "stacks/' ~" in p.read_text()
    ]
    assert offenders == []
