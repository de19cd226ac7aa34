"""The container build's flavour table and its layer plan (module_utils/image/container_flavours, filters
container_flavour_problems, container_source_mirror_lock, container_layer_roles and container_layer_plan): the
shipped table of playbooks/build_container.yml and the image factory's table of build_image.yml planned as the
playbook plans them, each bad table or request refused with a message naming the key, and the source mirror's
lock read or refused naming the variable and the rule."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.trainstack.cluster.plugins.filter import container as container_filter
from ansible_collections.trainstack.cluster.plugins.module_utils.image import container_flavours as cf

from tests.support import REPO

PLAY = yaml.safe_load((REPO / "playbooks" / "build_container.yml").read_text())[0]["vars"]
TABLE: dict[str, Any] = PLAY["container_image_flavours"]
HOST_ROLES: list[str] = PLAY["container_host_roles"]
FACTORY: dict[str, Any] = yaml.safe_load((REPO / "playbooks" / "build_image.yml").read_text())[1]["vars"][
    "image_flavours"
]
CATALOG = str(REPO / "testcases")
KEYS = {name: f"{index:02d}" * 32 for index, name in enumerate(TABLE)}


def table(**changes: Any) -> dict[str, Any]:
    """The shipped table with flavours added or replaced (None removes one)."""
    out = copy.deepcopy(TABLE)
    for name, entry in changes.items():
        if entry is None:
            out.pop(name)
        else:
            out[name] = entry
    return out


def plan(requested: list[str], flavours: dict[str, Any] | None = None, stack: str = "ts-1") -> dict:
    flavours = TABLE if flavours is None else flavours
    layers = cf.plan_roles(flavours, requested, FACTORY, HOST_ROLES)
    return cf.plan_layers(flavours, layers["chain"], layers["roles"], KEYS, "trainstack", stack)


def test_a_request_brings_its_ancestors_in_table_order() -> None:
    assert cf.build_chain(TABLE, ["cuda-pytorch-fsdp"]) == ["base", "pytorch-cuda", "cuda-pytorch-fsdp"]
    assert cf.build_chain(TABLE, ["pytorch", "base"]) == ["base", "pytorch"]
    assert cf.build_chain(TABLE, list(TABLE)) == list(TABLE)


def test_a_factory_flavour_layer_runs_its_roles_less_the_hosts_and_its_parents() -> None:
    roles = cf.plan_roles(TABLE, ["pytorch"], FACTORY, HOST_ROLES)["roles"]
    base = [r["role"] for r in roles["base"]]
    assert base == ["base", "cuda", "nccl", "efa", "aws_ofi_nccl"]
    assert not set(base) & set(HOST_ROLES)
    # slurm-gpu holds every role of base-gpu and pytorch: the layer on base adds pytorch only.
    assert roles["pytorch"] == [{"role": "pytorch", "components": ["pytorch"]}]


def test_a_flavour_with_its_own_roles_runs_them_as_named() -> None:
    roles = cf.plan_roles(TABLE, ["cuda-hf-finetune"], FACTORY, HOST_ROLES)["roles"]
    assert roles["pytorch-cuda"] == TABLE["pytorch-cuda"]["roles"]
    assert roles["cuda-hf-finetune"] == [{"role": "pytorch", "components": ["pytorch"]}]


def test_each_layer_is_named_tagged_and_placed_on_its_parent() -> None:
    layers = plan(["cuda-megatron-gpt"])
    assert list(layers) == ["base", "pytorch-cuda", "cuda-megatron-gpt"]
    case = layers["cuda-megatron-gpt"]
    tag = "ts-1-" + KEYS["cuda-megatron-gpt"][:12]
    assert case["image"] == f"localhost/trainstack/cuda-megatron-gpt:{tag}"
    assert case["tags"] == [tag, "ts-1"]
    assert case["parent"] == layers["pytorch-cuda"]["image"]
    assert layers["base"]["parent"] == "scratch"
    assert [layer["flavour"] for layer in case["layers"]] == ["base", "pytorch-cuda", "cuda-megatron-gpt"]
    assert case["layers"][0] == {
        "flavour": "base",
        "key": KEYS["base"],
        "image": "trainstack/base:ts-1-" + KEYS["base"][:12],
    }
    assert case["testcases"] == ["megatron/gpt"] and case["vars"] == TABLE["cuda-megatron-gpt"]["vars"]
    assert case["working"] == "trainstack-build-cuda-megatron-gpt"
    assert layers["base"]["vars"] == {} and layers["base"]["testcases"] == []


def test_chain_roles_and_gpu_components_accumulate_once() -> None:
    layers = plan(["cuda-jax-llama"])
    case = layers["cuda-jax-llama"]
    # cuda and aws_ofi_nccl are base's and pytorch-cuda's, pytorch pytorch-cuda's and the case's: an equal
    # entry is kept once, where it first comes.
    assert [r["role"] for r in case["chain_roles"]] == [
        "base",
        "cuda",
        "nccl",
        "efa",
        "aws_ofi_nccl",
        "nccl_tests",
        "pytorch",
    ]
    # Only gpu layers read the stack's GPU line: base (not gpu) adds no component.
    assert layers["base"]["gpu_components"] == []
    # pytorch-cuda's efa entry equals base's (skipped there: the stack pins no EFA for the lab's Debian 12);
    # its component is read from the GPU line in pytorch-cuda's layer.
    assert case["gpu_components"] == ["cuda", "efa_installer", "aws_ofi_nccl", "nccl_tests", "pytorch"]


def test_a_stack_id_that_makes_no_tag_is_refused() -> None:
    with pytest.raises(cf.ContainerFlavourError, match=r"trainstack_stack=ts 1: an image tag is"):
        plan(["base"], stack="ts 1")


BAD_TABLES = [
    (
        "unknown parent",
        table(extra={"parent": "nope", "image_flavour": "base-gpu"}),
        "container_image_flavours names a parent that is not one of its flavours (extra.parent: nope",
    ),
    (
        "parent listed after its child",
        {
            "a": {"parent": "b", "image_flavour": "slurm-gpu"},
            "b": {"parent": "", "image_flavour": "base-gpu"},
        },
        "container_image_flavours: a is listed before its parent b",
    ),
    (
        "unknown key",
        table(extra={"parent": "base", "roles": [], "packages": []}),
        "(unknown keys are refused: extra has packages)",
    ),
    ("no roles", table(extra={"parent": "base"}), "names its roles (roles) or the image factory's flavour"),
    (
        "unknown image factory flavour",
        table(extra={"parent": "base", "image_flavour": "nope"}),
        "container_image_flavours.extra.image_flavour: nope is not a flavour of the image factory",
    ),
    (
        "flavour name not an image name",
        table(Extra={"parent": "base", "roles": []}),
        "container_image_flavours.Extra: a flavour's name is part of its image's name",
    ),
    (
        "role named twice",
        table(extra={"parent": "base", "roles": [{"role": "pytorch"}, {"role": "pytorch"}]}),
        "container_image_flavours.extra.roles: pytorch is listed more than once",
    ),
    (
        "role without a name",
        table(extra={"parent": "base", "roles": [{"components": ["pytorch"]}]}),
        "container_image_flavours.extra.roles: a list of {role, components}",
    ),
    (
        "gpu not a boolean",
        table(extra={"parent": "base", "roles": [], "gpu": "yes"}),
        "container_image_flavours.extra.gpu: true or false",
    ),
    (
        "test cases on a flavour without gpu",
        table(extra={"parent": "base", "roles": [], "testcases": ["pytorch/ddp"]}),
        "container_image_flavours.extra.testcases: only a gpu flavour bakes",
    ),
    ("no table", {}, "container_image_flavours must be a non-empty mapping"),
]


@pytest.mark.parametrize(
    ("flavours", "expected"), [c[1:] for c in BAD_TABLES], ids=[c[0] for c in BAD_TABLES]
)
def test_a_bad_table_is_refused_naming_the_key(flavours: dict, expected: str) -> None:
    problems = cf.check_request(flavours, ["base"], FACTORY)
    assert any(expected in p for p in problems), problems
    with pytest.raises(AnsibleFilterError, match=r"^container_layer_roles: "):
        container_filter.container_layer_roles(flavours, ["base"], FACTORY, HOST_ROLES)


BAD_REQUESTS = [
    ("unknown flavour", ["base", "jax"], "container_flavours: jax is not a container flavour (one of base,"),
    ("a string", "base", "container_flavours must be a non-empty list of flavours"),
    ("empty", [], "container_flavours must be a non-empty list of flavours"),
    ("named twice", ["base", "pytorch", "base"], "container_flavours: base is named more than once"),
]


@pytest.mark.parametrize(
    ("requested", "expected"), [c[1:] for c in BAD_REQUESTS], ids=[c[0] for c in BAD_REQUESTS]
)
def test_a_bad_request_is_refused_naming_the_variable(requested: Any, expected: str) -> None:
    problems = cf.check_request(TABLE, requested, FACTORY)
    assert any(expected in p for p in problems), problems


def test_the_shipped_table_and_the_default_request_pass() -> None:
    assert cf.check_request(TABLE, PLAY["container_flavours"], FACTORY) == []
    assert cf.check_request(TABLE, list(TABLE), FACTORY) == []


def test_a_case_without_an_environment_for_the_target_is_refused() -> None:
    problems = cf.testcase_problems(
        TABLE,
        ["base", "pytorch-cuda", "cuda-pytorch-ddp"],
        ["pytorch/ddp"],
        {"pytorch/ddp": "pytorch/ddp has no requirements.gpu-debian-12-x86_64.lock"},
        "gpu-debian-12-x86_64",
    )
    assert problems == [
        "container_image_flavours.cuda-pytorch-ddp.testcases: pytorch/ddp has no environment for "
        "gpu-debian-12-x86_64 (pytorch/ddp has no requirements.gpu-debian-12-x86_64.lock)"
    ]


def test_the_shipped_cases_have_the_containers_locks_and_others_are_refused() -> None:
    """Through the filter, with the real catalog and locks: the shipped table passes for x86_64, a flavour of
    deepspeed/zero3 (a source-built wheel) or of an unknown case is refused, and a target without Debian 12
    GPU locks (aarch64) is refused only when a test case flavour is asked for."""
    every = list(TABLE)
    problems = container_filter.container_flavour_problems
    assert problems(TABLE, every, FACTORY, CATALOG, "debian-12", "x86_64") == []
    zero3 = table(**{"cuda-deepspeed-zero3": {**TABLE["cuda-pytorch-ddp"], "testcases": ["deepspeed/zero3"]}})
    found = problems(zero3, ["cuda-deepspeed-zero3"], FACTORY, CATALOG, "debian-12", "x86_64")
    assert len(found) == 1 and found[0].startswith(
        "container_image_flavours.cuda-deepspeed-zero3.testcases: deepspeed/zero3 has no environment for "
        "gpu-debian-12-x86_64 (deepspeed"
    )
    typo = table(**{"cuda-x": {**TABLE["cuda-pytorch-ddp"], "testcases": ["pytorch/dpd"]}})
    found = problems(typo, ["cuda-x"], FACTORY, CATALOG, "debian-12", "x86_64")
    assert found and "cuda-x.testcases: pytorch/dpd is not a test case of the catalog" in found[0]
    assert problems(TABLE, ["base", "pytorch"], FACTORY, CATALOG, "debian-12", "aarch64") == []
    found = problems(TABLE, ["cuda-pytorch-ddp"], FACTORY, CATALOG, "debian-12", "aarch64")
    assert found and "pytorch/ddp has no environment for gpu-debian-12-aarch64" in found[0]


def test_the_layer_plan_filter_refuses_naming_itself() -> None:
    layers = container_filter.container_layer_roles(TABLE, ["base"], FACTORY, HOST_ROLES)
    with pytest.raises(AnsibleFilterError, match=r"^container_layer_plan: trainstack_stack=a/b"):
        container_filter.container_layer_plan(TABLE, layers, KEYS, "trainstack", "a/b")


SETTINGS = {
    "artifact_mirror_url": "http://mirror",
    "host_ca_certs": True,
    "cuda_archs": ["sm_90"],
    "source_mirror": "http://sources",
    "source_mirror_artifacts": {"aws-efa-installer": {"url": "https://x/i.tar.gz", "sha256": "ab"}},
    "rootfs": ["bookworm", "http://deb.debian.org/debian"],
    "pytorch_wheelhouse": "/wheels",
}
ROOT = "/repo"
FILES = [
    {"path": f"{ROOT}/{path}", "checksum": f"sum-{path}"}
    for path in (
        "roles/pytorch/tasks/main.yml",
        "roles/base/tasks/main.yml",
        "roles/image_prepare/tasks/main.yml",
        "plugins/filter/container.py",
        "packer/lxc/lxc-trainstack-debian",
        "docs/containers.md",
        "roles/pytorch_extra/tasks/main.yml",
    )
]
WHEELS = [
    {"path": "/wheels/torch-2-py3-none-any.whl", "size": 7},
    {"path": "/wheels/a-1-py3-none-any.whl", "size": 3},
]


def inputs(name: str, requested: list[str], settings: dict | None = None) -> dict:
    layers = cf.plan_roles(TABLE, requested, FACTORY, HOST_ROLES)
    return cf.layer_key_inputs(TABLE, name, layers["roles"], KEYS, FILES, ROOT, settings or SETTINGS, WHEELS)


def test_a_layers_key_covers_its_roles_the_support_roles_and_the_plugins() -> None:
    assert cf.key_dirs([{"role": "pytorch"}, {"role": "pytorch"}]) == [
        "plugins",
        "packer/lxc",
        "roles/pytorch",
        "roles/image_prepare",
        "roles/image_manifest",
        "roles/image_selfcheck",
        "roles/artifact",
    ]
    # pytorch's layer: not base's role files, nor a role whose name only starts like its own, nor docs.
    assert [path for path, _sum in inputs("pytorch", ["pytorch"])["files"]] == [
        "packer/lxc/lxc-trainstack-debian",
        "plugins/filter/container.py",
        "roles/image_prepare/tasks/main.yml",
        "roles/pytorch/tasks/main.yml",
    ]
    assert cf.plan_roles(TABLE, ["pytorch"], FACTORY, HOST_ROLES)["key_dirs"][:4] == [
        "plugins",
        "packer/lxc",
        "roles/base",
        "roles/cuda",
    ]


def test_a_layers_key_covers_its_parents_key_and_its_entry_without_the_parent() -> None:
    case = inputs("cuda-pytorch-ddp", ["cuda-pytorch-ddp"])
    assert case["parent"] == KEYS["pytorch-cuda"] and inputs("base", ["base"])["parent"] == ""
    assert case["entry"] == {k: v for k, v in TABLE["cuda-pytorch-ddp"].items() if k != "parent"}
    assert case["roles"] == [{"role": "pytorch", "components": ["pytorch"]}]


def test_only_the_settings_that_change_a_layer_are_in_its_key() -> None:
    base = inputs("base", ["base"])["variables"]
    # Not a gpu layer: no GPU architectures or source mirror; the first layer: the root filesystem's source;
    # no pytorch role: no wheels.
    assert base == {
        "artifact_mirror_url": "http://mirror",
        "host_ca_certs": True,
        "cuda_archs": [],
        "source_mirror": "",
        "source_mirror_artifacts": {},
        "rootfs": ["bookworm", "http://deb.debian.org/debian"],
        "wheels": [],
    }
    pytorch = inputs("pytorch", ["pytorch"])["variables"]
    assert pytorch["rootfs"] == [] and pytorch["wheels"] == [
        ["a-1-py3-none-any.whl", 3],
        ["torch-2-py3-none-any.whl", 7],
    ]
    assert inputs("pytorch", ["pytorch"], {**SETTINGS, "pytorch_wheelhouse": ""})["variables"]["wheels"] == []
    cuda = inputs("pytorch-cuda", ["pytorch-cuda"])["variables"]
    assert cuda["cuda_archs"] == ["sm_90"] and cuda["source_mirror"] == "http://sources"
    # The sha256s the source mirror's lock vouches for (its EFA installer): other bytes, another layer.
    assert cuda["source_mirror_artifacts"] == SETTINGS["source_mirror_artifacts"]
    unlocked = {k: v for k, v in SETTINGS.items() if k != "source_mirror_artifacts"}
    assert inputs("pytorch-cuda", ["pytorch-cuda"], unlocked)["variables"]["source_mirror_artifacts"] == {}
    # The CUDA flavours install torch from the index (their vars set pytorch_wheelhouse ""): no wheels.
    assert cuda["wheels"] == []


def test_pytorch_cudas_key_covers_the_efa_role() -> None:
    """The EFA installer's inputs build pytorch-cuda again: the role's files (its switches, its steps)
    here, the stack's pin and lock and the mirror's lock above; base, which skips efa on Debian 12, is keyed
    by it too."""
    roles = cf.plan_roles(TABLE, ["pytorch-cuda"], FACTORY, HOST_ROLES)["roles"]
    files = [*FILES, {"path": f"{ROOT}/roles/efa/tasks/install_steps.yml", "checksum": "sum-efa"}]
    own = cf.layer_key_inputs(TABLE, "pytorch-cuda", roles, KEYS, files, ROOT, SETTINGS, WHEELS)
    assert ["roles/efa/tasks/install_steps.yml", "sum-efa"] in own["files"]
    assert {"role": "efa", "components": ["efa_installer"]} in own["roles"]


GOOD_LOCK = {
    "format": 1,
    "artifacts": {"aws-efa-installer": {"url": "http://m/i.tar.gz", "sha256": "ab" * 32}},
}


def lock_file(tmp_path: Any, text: str) -> str:
    path = tmp_path / "lock.json"
    path.write_text(text)
    return str(path)


def test_a_good_source_mirror_lock_gives_its_artifacts(tmp_path: Any) -> None:
    read = container_filter.container_source_mirror_lock(lock_file(tmp_path, json.dumps(GOOD_LOCK)))
    assert read == {"artifacts": GOOD_LOCK["artifacts"], "problems": []}


def test_no_source_mirror_lock_is_no_artifacts() -> None:
    assert cf.source_mirror_lock("") == {"artifacts": {}, "problems": []}


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (None, "there is no file at that path"),
        ('["aws-efa-installer"]', "it holds a list, not a mapping"),
        ('{"format": 1, "stack": "ts-1"}', "it has no artifacts key"),
        ('{"artifacts": []}', "its artifacts is a list, not a mapping"),
        ('{"artifacts": ', "it is not JSON"),
    ],
    ids=["missing", "not a mapping", "without artifacts", "artifacts not a mapping", "not JSON"],
)
def test_a_bad_source_mirror_lock_is_refused_naming_the_variable_and_the_rule(
    tmp_path: Any, text: str | None, why: str
) -> None:
    path = str(tmp_path / "missing.json") if text is None else lock_file(tmp_path, text)
    read = cf.source_mirror_lock(path)
    assert read["artifacts"] == {}
    [problem] = read["problems"]
    assert problem.startswith(
        f"container_source_mirror_lock={path}: a lock file on the controller with an artifacts"
    )
    assert why in problem


def test_a_source_mirror_lock_that_is_not_a_path_is_refused() -> None:
    [problem] = cf.source_mirror_lock(["lock.json"])["problems"]
    assert problem.startswith("container_source_mirror_lock: a lock file") and problem.endswith("got a list")
