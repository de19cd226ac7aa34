"""The local image build's stage keys (module_utils/image/stages.py) and the planner that keys a real build
(scripts/image_stages.py): a change reaches the key of its stage and every later one, never an earlier one;
file order and mtimes do not count; the flavour, the stack and a role's own variables do. The collection's
roles are held to what the keys assume (literal include_role names, no facts handed from one stage to
another)."""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.trainstack.cluster.plugins.module_utils.image import stages as st

from tests.support import REPO


def _load_planner() -> Any:
    """scripts/image_stages.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("image_stages", REPO / "scripts" / "image_stages.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


image_stages = _load_planner()

ROLES = ("base", "nccl", "slurm", "pytorch")
ENTRIES = [{"role": r, "components": [] if r == "base" else [r]} for r in ROLES]


def _write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def make_repo(root: Path, reverse: bool = False) -> Path:
    """A collection of four roles (slurm and pytorch download through the artifact role), the seed's
    directories and one test case; ``reverse`` creates the same files in the opposite order."""
    files = {
        "plugins/modules/m.py": "print('m')\n",
        "packer/lxc/lxc-trainstack-debian": "#!/bin/sh\n",
        "roles/image_prepare/tasks/install.yml": "---\n- ansible.builtin.debug: {msg: prepare}\n",
        "playbooks/build_image.yml": "---\n[]\n",
        "roles/artifact/tasks/main.yml": "---\n- ansible.builtin.debug: {msg: fetch}\n",
        "testcases/gpu_targets.yml": "targets: []\n",
        "testcases/pytorch/fsdp/testcase.yml": "name: fsdp\n",
        "testcases/pytorch/fsdp/requirements.lock": "torch==2.13.0\n",
        "testcases/pytorch/fsdp/train.py": "print('train')\n",
    }
    for role in ROLES:
        files[f"roles/{role}/tasks/install.yml"] = f"---\n- ansible.builtin.debug: {{msg: {role}}}\n"
        files[f"roles/{role}/defaults/main.yml"] = f"{role}_setting: 1\n"
    files["roles/slurm/tasks/fetch.yml"] = (
        "---\n- ansible.builtin.include_role:\n    name: trainstack.cluster.artifact\n"
    )
    files["roles/pytorch/meta/main.yml"] = "---\ndependencies:\n  - role: artifact\n"
    for relative in sorted(files, reverse=reverse):
        _write(root, relative, files[relative])
    return root


def keys(
    repo: Path,
    entries: list[dict[str, Any]] = ENTRIES,
    stack: dict[str, Any] | None = None,
    variables: dict[str, Any] | None = None,
    flavour: str = "slurm-gpu",
    wheels: list[list[Any]] | None = None,
) -> list[str]:
    """The stage keys of a build of ``repo``, made as the planner makes them."""
    build_vars = {"pytorch_testcases": "pytorch/fsdp", "pytorch_wheelhouse": "/w", **(variables or {})}
    seed = st.seed_key(
        "bookworm-amd64-5f2489db9349",
        st.file_digests(repo, st.SEED_PATHS),
        stack or {"id": "ts-1", "components": {"slurm": {"version": "24.11"}}},
        [],
        {"flavour": flavour, "host_ca_certs": True},
    )
    inputs = {
        str(e["role"]): st.role_input(repo, str(e["role"]), build_vars, wheels or [["torch.whl", 10]])
        for e in entries
    }
    return [stage.key for stage in st.stage_keys(seed, entries, inputs)]


def changed(before: list[str], after: list[str]) -> list[bool]:
    return [b != a for b, a in zip(before, after, strict=True)]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def test_a_change_to_the_last_role_changes_only_its_key(repo: Path) -> None:
    before = keys(repo)
    _write(repo, "roles/pytorch/tasks/install.yml", "---\n- ansible.builtin.debug: {msg: pytorch 2}\n")
    assert changed(before, keys(repo)) == [False, False, False, True]


def test_a_change_to_an_early_role_changes_its_key_and_every_later_one(repo: Path) -> None:
    before = keys(repo)
    _write(repo, "roles/nccl/defaults/main.yml", "nccl_setting: 2\n")
    assert changed(before, keys(repo)) == [False, True, True, True]


def test_a_role_reached_by_include_role_or_meta_dependency_is_part_of_the_key(repo: Path) -> None:
    """artifact is included by slurm (include_role) and a dependency of pytorch (meta): both keys move, and
    base and nccl, which reach it by neither, keep theirs."""
    assert st.role_closure(repo / "roles", "slurm") == ["artifact", "slurm"]
    assert st.role_closure(repo / "roles", "pytorch") == ["artifact", "pytorch"]
    before = keys(repo)
    _write(repo, "roles/artifact/tasks/main.yml", "---\n- ansible.builtin.debug: {msg: fetch 2}\n")
    assert changed(before, keys(repo)) == [False, False, True, True]


def test_seed_files_change_every_key(repo: Path) -> None:
    before = keys(repo)
    _write(repo, "plugins/modules/m.py", "print('m2')\n")
    assert changed(before, keys(repo)) == [True, True, True, True]


def test_file_order_mtimes_and_ignored_files_do_not_count(tmp_path: Path, repo: Path) -> None:
    other = make_repo(tmp_path / "other", reverse=True)
    assert keys(other) == keys(repo)
    for path in repo.rglob("*"):
        os.utime(path, (1, 1))
    _write(repo, "roles/pytorch/README.md", "generated\n")
    _write(repo, "plugins/modules/__pycache__/m.cpython-311.pyc", "bytecode")
    assert keys(repo) == keys(other)


def test_the_order_files_are_listed_in_does_not_count(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Directories list their files in any order (and the paths asked for may come in any order)."""
    before = keys(repo)
    assert st.file_digests(repo, ["roles/slurm", "roles/base"]) == st.file_digests(
        repo, ["roles/base", "roles/slurm"]
    )
    walk = os.walk

    def reversed_walk(top: Any) -> Any:
        for folder, dirs, files in walk(top):
            dirs.reverse()
            yield folder, dirs, list(reversed(files))

    monkeypatch.setattr(st.os, "walk", reversed_walk)
    assert keys(repo) == before


def test_the_executable_bit_counts(repo: Path) -> None:
    before = keys(repo)
    (repo / "roles" / "slurm" / "defaults" / "main.yml").chmod(0o755)
    assert changed(before, keys(repo)) == [False, False, True, True]


def test_stage_order_counts(repo: Path) -> None:
    swapped = [ENTRIES[0], ENTRIES[2], ENTRIES[1], ENTRIES[3]]
    assert set(keys(repo)).isdisjoint(keys(repo, swapped)[1:])


def test_flavour_stack_and_build_variables_give_other_keys(repo: Path) -> None:
    base = keys(repo)
    assert set(base).isdisjoint(keys(repo, flavour="pcs-gpu"))
    assert set(base).isdisjoint(
        keys(repo, stack={"id": "ts-2", "components": {"slurm": {"version": "25.05"}}})
    )


def test_the_pytorch_roles_own_inputs_change_only_its_key(repo: Path) -> None:
    """Its test case locks and manifests, the wheelhouse's names and sizes, the test cases asked for; a test
    case's training code, which the role does not bake, does not count."""
    before = keys(repo)
    assert changed(before, keys(repo, variables={"pytorch_testcases": "pytorch/ddp"})) == [
        False,
        False,
        False,
        True,
    ]
    assert changed(before, keys(repo, wheels=[["torch.whl", 11]])) == [False, False, False, True]
    assert keys(repo, variables={"unrelated": "x"}) == before
    _write(repo, "testcases/pytorch/fsdp/train.py", "print('train 2')\n")
    assert keys(repo) == before
    _write(repo, "testcases/pytorch/fsdp/requirements.lock", "torch==2.13.1\n")
    assert changed(before, keys(repo)) == [False, False, False, True]


def test_a_missing_input_and_an_empty_base_are_refused(repo: Path) -> None:
    with pytest.raises(st.StageError, match="stage key input plugins/absent does not exist"):
        st.file_digests(repo, ["plugins/absent"])
    with pytest.raises(st.StageError, match="base root filesystem's key is empty"):
        st.seed_key("", [], {}, [], {})
    with pytest.raises(st.StageError, match="stage role nope is not a role of this collection"):
        st.role_closure(repo / "roles", "nope")


def test_a_rebuild_of_a_role_outside_the_build_is_refused(repo: Path) -> None:
    stages = [st.Stage(index=1, role="base", key="k")]
    assert st.check_rebuild(stages, "base") == []
    assert st.check_rebuild(stages, "pytroch") == [
        "IMAGE_STAGE_REBUILD=pytroch is not a stage of this build (its stages: base)"
    ]


# ---------------------------------------------------------------- the collection's roles and the planner

FACTORY: dict[str, Any] = yaml.safe_load((REPO / "playbooks" / "build_image.yml").read_text())[1]["vars"][
    "image_flavours"
]
STAGE_ROLES = sorted({e["role"] for flavour in FACTORY.values() for e in st.flatten(flavour)})


@pytest.mark.parametrize("role", STAGE_ROLES)
def test_every_role_a_stage_applies_names_the_roles_it_includes_literally(role: str) -> None:
    """A templated include_role name could not be followed into the key."""
    templated = []
    for path in sorted((REPO / "roles" / role / "tasks").glob("*.yml")):
        names = st._included_roles(yaml.safe_load(path.read_text()))
        templated += [f"{path.name}: {n}" for n in names if "{" in n]
    assert templated == []


def _facts_set(role: str) -> set[str]:
    """Facts a role sets or registers (its stage's), read from its task files."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("set_fact", "ansible.builtin.set_fact") and isinstance(value, dict):
                    found.update(k for k in value if k != "cacheable")
                elif key == "register" and isinstance(value, str):
                    found.add(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for path in glob.glob(str(REPO / "roles" / role / "tasks" / "*.yml")):
        walk(yaml.safe_load(Path(path).read_text()))
    return found


def test_no_stage_reads_a_fact_another_stage_sets() -> None:
    """A resumed build skips the earlier stages' tasks: a fact one of them set would be missing. Each stage
    is keyed by files and variables only, so the roles must hand nothing on through facts (a role's own
    includes, such as artifact's results, are inside its stage)."""
    crossing = []
    for role in STAGE_ROLES:
        own = set(st.role_closure(REPO / "roles", role))
        for other in STAGE_ROLES:
            if other in own:
                continue
            text = "\n".join(p.read_text() for p in (REPO / "roles" / role).rglob("*.yml"))
            for fact in _facts_set(other) - set().union(*(_facts_set(r) for r in own)):
                if re.search(rf"\b{re.escape(fact)}\b", text):
                    crossing.append(f"{role} reads {fact}, set by {other}")
    assert crossing == []


def _args(tmp_path: Path, **overrides: Any) -> argparse.Namespace:
    values = {
        "flavour": "slurm-gpu",
        "stack": (REPO / "stacks" / "current").read_text().strip(),
        "cache_dir": str(tmp_path / "cache"),
        "out": tmp_path / "stages.json",
        "keep": "8",
        "rebuild": "",
        "mirror_url": "",
        "wheelhouse": "",
        "testcases": "pytorch/fsdp,pytorch/ddp",
        "host_ca_certs": False,
        "suite": "bookworm",
        "lxc_mirror": "http://deb.debian.org/debian",
        "arch": "x86_64",
    }
    values.update(overrides)
    return argparse.Namespace(**values)


def test_the_planner_keys_the_roles_image_prepare_applies_on_the_local_os(tmp_path: Path) -> None:
    """The stages are the flavour's roles the stack pins for Debian 12 (the stack_image_roles rule), and
    nothing is reused from an empty cache."""
    result = image_stages.plan(_args(tmp_path))
    assert [s["role"] for s in result["stages"]] == ["base", "nccl", "slurm", "pytorch"]
    assert result["resume"] == {"after": 0, "snapshot": "", "key": ""}
    assert all(s["snapshot"] == f"{tmp_path}/cache/stages/{s['key']}.tar" for s in result["stages"])
    again = image_stages.plan(_args(tmp_path))
    assert [s["key"] for s in again["stages"]] == [s["key"] for s in result["stages"]]
    other = image_stages.plan(_args(tmp_path, testcases="pytorch/fsdp"))
    assert changed([s["key"] for s in result["stages"]], [s["key"] for s in other["stages"]]) == [
        False,
        False,
        False,
        True,
    ]


def test_two_flavours_with_the_same_roles_get_other_keys(tmp_path: Path) -> None:
    """pcs-gpu applies base, nccl and slurm on Debian 12 as slurm-gpu does; its snapshots are its own."""
    slurm = image_stages.plan(_args(tmp_path))["stages"]
    pcs = image_stages.plan(_args(tmp_path, flavour="pcs-gpu"))["stages"]
    assert [s["role"] for s in pcs] == [s["role"] for s in slurm][:3]
    assert {s["key"] for s in pcs}.isdisjoint(s["key"] for s in slurm)


def test_the_planner_asks_the_lxc_template_for_the_base_key() -> None:
    assert re.fullmatch(
        r"bookworm-[a-z0-9]+-[0-9a-f]{12}", image_stages.base_key("bookworm", "http://m/debian")
    )
    assert image_stages.base_key("bookworm", "http://m/debian") != image_stages.base_key(
        "trixie", "http://m/debian"
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"cache_dir": "FILE"}, "IMAGE_CACHE_DIR={cache}: {cache} exists and is not a directory"),
        ({"cache_dir": "relative/cache"}, "IMAGE_CACHE_DIR='relative/cache' must be an absolute path"),
        ({"keep": "0"}, "IMAGE_STAGE_KEEP='0' must be a whole number >= 1"),
        (
            {"rebuild": "efa"},
            "IMAGE_STAGE_REBUILD=efa is not a stage of this build (its stages: base, nccl, slurm, pytorch)",
        ),
        ({"flavour": "gpu"}, "IMAGE_FLAVOUR=gpu is not a flavour of build_image.yml"),
    ],
)
def test_bad_settings_are_refused_naming_the_setting_before_anything_is_written(
    tmp_path: Path, overrides: dict[str, Any], message: str
) -> None:
    cache = tmp_path / "a-file"
    cache.write_text("")
    if overrides.get("cache_dir") == "FILE":
        overrides = {**overrides, "cache_dir": str(cache)}
    args = _args(tmp_path, **overrides)
    assert image_stages.main(_argv(args)) == 2
    assert not args.out.exists()
    with pytest.raises(ValueError, match=re.escape(message.format(cache=cache))):
        image_stages.plan(args)


def _argv(args: argparse.Namespace) -> list[str]:
    argv = [
        "--flavour",
        args.flavour,
        "--stack",
        args.stack,
        "--cache-dir",
        args.cache_dir,
        "--out",
        str(args.out),
    ]
    argv += [
        "--keep",
        args.keep,
        "--rebuild",
        args.rebuild,
        "--testcases",
        args.testcases,
        "--arch",
        args.arch,
    ]
    return [*argv, "--no-host-ca-certs"]


def test_the_planner_writes_the_plan_the_build_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _args(tmp_path)
    assert image_stages.main(_argv(args)) == 0
    plan = yaml.safe_load(args.out.read_text())
    assert plan["variables"] == {
        "flavour": "slurm-gpu",
        "stack": args.stack,
        "artifact_mirror_url": "",
        "host_ca_certs": False,
        "pytorch_wheelhouse": "",
        "pytorch_testcases": "pytorch/fsdp,pytorch/ddp",
    }
    out = capsys.readouterr().out
    assert "image-stages: 4 pytorch" in out and "starts from the debootstrap base" in out
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
