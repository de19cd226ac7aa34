# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The launch plan of one training request, and every check that can refuse it before anything is staged.

A request is the training_job role's variables (``training_job_*``, defaults filled in). Checks come in
three groups, run at the points where their inputs exist: the request alone (``input_problems``), the request
against the test case's manifest and lock (``request_problems``), and the container image as its registry
described it (``image_problems``). Each problem is one sentence that names the variable and the rule it broke;
the role joins them into one refusal, so a user fixes every mistake in one round.

``launch_plan`` is everything the role's tasks and templates need: paths on the shared filesystem, the
lock for the nodes' target and the virtualenv keyed by its content (or the environment the nodes' image baked
from it), the entrypoint's arguments and command line, the ranks' environment from the instance catalog, and
how the container image is imported.

``node`` is what the launch read about the nodes: ``facts`` (the launch host's distribution facts, or ``os``
already as a stack OS id) and ``arch``, ``envs``
(the environments its image.json lists) and ``torch`` (the version ``training_job_python`` imports, when the
run does not install the lock's own; None when it was not read).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..aws import cluster_tags
from ..stack import stack_resolver
from . import locks

LAUNCHERS = ("slurm", "local", "kubernetes")

# Shapes of what reaches a path, a shell word or a manifest field.
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
OPTION_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
IMAGE_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@#+-]*$")
NODE_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
PARTITION = re.compile(r"^[A-Za-z0-9_.-]*$")
NSYS_ARGS = re.compile(r"^[A-Za-z0-9_=,.:/ +-]*$")
NSYS_BIN = re.compile(r"^[A-Za-z0-9_./+-]+$")
INCLUDE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)+$")
# An absolute path that is not '/' and has no '.' or '..' segment (the role creates or removes under it).
UNSAFE_PATH = re.compile(r"^(?!/)|^/+$|(^|/)\.{1,2}(/|$)")
ECR_REGISTRY = re.compile(r"^[0-9]{12}\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")
VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+_-]*$")
LOCK_PIN = re.compile(r"(?m)^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s+;]+)")

Request = Mapping[str, Any]
Node = Mapping[str, Any]


def as_int(value: Any) -> int:
    """An integer as Jinja's ``int`` filter reads one (a number, or a string of one; anything else is 0).

    Inputs arrive from YAML, ``-e`` strings and inventories alike, so ``"2"`` and ``2`` must plan the same.
    """
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def as_bool(value: Any) -> bool:
    """A boolean as Ansible's ``bool`` filter reads one ("yes", "true", "1", "on" and true are true)."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("yes", "on", "1", "true", "y", "t")


def _nested(value: Any) -> bool:
    """A list or mapping: a value that cannot become one environment variable or one command-line word."""
    return not isinstance(value, str) and isinstance(value, (Mapping, Sequence, set))


def _shown(value: Any) -> str:
    """A value as the messages show it (lists as Python writes them)."""
    return str(value)


def normalized_pin(pin: str) -> str:
    """``name==version`` compared as pip compares names: lowercase, runs of '.', '_', '-' as one '-'."""
    return re.sub(r"[._-]+(?=[^=]*==)", "-", pin.lower())


def lock_pins(lock: str) -> list[str]:
    """The lock's ``name==version`` pins, local version labels (torch's '+cpu') left out."""
    return [normalized_pin("==".join(match)) for match in LOCK_PIN.findall(lock)]


def manifest_pins(requirements: Sequence[str]) -> list[str]:
    """The manifest's pins without extras and local version labels."""
    pins = []
    for pin in requirements:
        pin = re.sub(r"\[[^\]]*\]", "", str(pin))
        pins.append(normalized_pin(re.sub(r"\+[^=]*$", "", pin)))
    return pins


def _input_rules(r: Request, instance_types: Sequence[str]) -> list[tuple[bool, Callable[[], str]]]:
    """(ok, message) of each check that needs nothing but the request, in the order users see them."""
    name = str(r["training_job_name"])
    nodes, procs = r["training_job_nodes"], r["training_job_procs_per_node"]
    nodelist = list(r["training_job_nodelist"])
    launcher = r["training_job_launcher"]
    kubernetes = launcher == "kubernetes"
    env, pip_env, args = r["training_job_env"], r["training_job_pip_env"], r["training_job_args"]
    bad_env = [key for key in env if not ENV_NAME.match(str(key))]
    bad_pip_env = [key for key in pip_env if not ENV_NAME.match(str(key))]
    bad_args = [key for key in args if not OPTION_NAME.match(str(key))]
    world = as_int(nodes) * as_int(procs)
    ranks = list(r["training_job_nsys_ranks"])
    image, k8s_image = r["training_job_container_image"], r["training_job_k8s_image"]
    itype = r["training_job_instance_type"]
    node_os, node_arch = str(r.get("training_job_node_os", "")), str(r.get("training_job_node_arch", ""))
    accept_torch = str(r.get("training_job_accept_torch", ""))

    storage = r.get("training_job_cluster_storage") or {}

    def path_rule(key: str, tail: str) -> tuple[bool, Callable[[], str]]:
        return (not UNSAFE_PATH.search(str(r[key])), lambda: f"{key} '{r[key]}' {tail}")

    absolute = "must be an absolute path other than '/' without '.' or '..' segments."
    return [
        (
            bool(SAFE_NAME.match(name)),
            lambda: (
                f"training_job_name '{name}' must be a plain name (letters, digits, '.', '_', '-', starting "
                "with a letter or digit): it names the run and checkpoint directories."
            ),
        ),
        path_rule("training_job_shared_dir", absolute),
        path_rule("training_job_results_dir", absolute),
        path_rule("training_job_python", "must be an absolute path to an interpreter."),
        (
            isinstance(storage, Mapping) and not storage_problems(storage),
            lambda: f"training_job_cluster_storage {' '.join(storage_problems(storage))}",
        ),
        (as_int(nodes) >= 1, lambda: f"training_job_nodes must be >= 1 (got {nodes})."),
        (
            not nodelist
            or (
                len(nodelist) == as_int(nodes)
                and len(set(map(str, nodelist))) == len(nodelist)
                and all(NODE_NAME.match(str(node)) for node in nodelist)
            ),
            lambda: (
                f"training_job_nodelist must be empty or name training_job_nodes={nodes} distinct Slurm "
                "nodes "
                f"(letters, digits, '.', '_', '-'); got {_shown(nodelist)}."
            ),
        ),
        (as_int(procs) >= 1, lambda: f"training_job_procs_per_node must be >= 1 (got {procs})."),
        (
            as_int(r["training_job_timeout"]) >= 1,
            lambda: f"training_job_timeout must be >= 1 second (got {r['training_job_timeout']}).",
        ),
        (
            1 <= as_int(r["training_job_rdzv_port"]) <= 65535,
            lambda: (
                "training_job_rdzv_port must be a port number, 1 to 65535 (got "
                f"{r['training_job_rdzv_port']})."
            ),
        ),
        (
            as_int(r["training_job_checkpoint_every"]) >= 0,
            lambda: f"training_job_checkpoint_every must be >= 0 (got {r['training_job_checkpoint_every']}).",
        ),
        (
            as_int(r["training_job_max_restarts"]) >= 0 and as_int(r["training_job_rank_restarts"]) >= 0,
            lambda: (
                "training_job_max_restarts and training_job_rank_restarts must be >= 0 (got "
                f"{r['training_job_max_restarts']}, {r['training_job_rank_restarts']})."
            ),
        ),
        (
            bool(PARTITION.match(str(r["training_job_partition"]))),
            lambda: (
                f"training_job_partition '{r['training_job_partition']}' must be a Slurm partition name "
                "(letters, digits, '.', '_', '-')."
            ),
        ),
        (
            not itype or itype in instance_types,
            lambda: f"training_job_instance_type '{itype}' is unknown; known: {', '.join(instance_types)}.",
        ),
        (
            not bad_env,
            lambda: (
                "training_job_env has key(s) that are not environment variable names (letters, digits, '_', "
                f"not starting with a digit): {_shown(bad_env)}."
            ),
        ),
        (
            not any(_nested(value) for value in env.values()),
            lambda: "training_job_env values must be strings, numbers or booleans (not lists or mappings).",
        ),
        (
            not bad_pip_env,
            lambda: (
                "training_job_pip_env has key(s) that are not environment variable names: "
                f"{_shown(bad_pip_env)}."
            ),
        ),
        (
            not bad_args,
            lambda: (
                f"training_job_args key(s) {_shown(bad_args)} are not option names: write them as the "
                "entrypoint spells them, lowercase with '-' and without leading dashes "
                f"({_shown([re.sub('^-+', '', str(key).lower()).replace('_', '-') for key in bad_args])})."
            ),
        ),
        (
            not any(_nested(value) for value in args.values()),
            lambda: (
                "training_job_args values must be strings, numbers, booleans or null (null drops a default), "
                "not lists or mappings."
            ),
        ),
        (
            image == "" or bool(IMAGE_REF.match(str(image))),
            lambda: (
                f"training_job_container_image '{image}' must be an image reference (no spaces or quotes)."
            ),
        ),
        (
            not kubernetes or bool(IMAGE_REF.match(str(k8s_image))) or (k8s_image == "" and image != ""),
            lambda: (
                f"training_job_k8s_image '{k8s_image}' must be an image reference holding the test case's "
                "requirements (the kubernetes launcher needs it, or training_job_container_image)."
            ),
        ),
        (
            not kubernetes or bool(DNS_LABEL.match(str(r["training_job_k8s_namespace"]))),
            lambda: (
                f"training_job_k8s_namespace '{r['training_job_k8s_namespace']}' must be a Kubernetes "
                "namespace "
                "name (lowercase DNS label)."
            ),
        ),
        (
            not kubernetes or bool(DNS_LABEL.match(name)),
            lambda: (
                f"training_job_name '{name}' must be a lowercase DNS label (a-z, 0-9, '-', at most 63) with "
                "the "
                "kubernetes launcher: it names the PyTorchJob."
            ),
        ),
        (
            all(0 <= as_int(rank) < world for rank in ranks),
            lambda: (
                f"training_job_nsys_ranks {_shown(ranks)} must be global ranks below the world size {world} "
                f"({nodes} node(s) x {procs})."
            ),
        ),
        (
            not ranks or not kubernetes,
            lambda: "training_job_nsys_ranks needs the slurm or local launcher (not kubernetes).",
        ),
        (
            as_int(r["training_job_nsys_delay"]) >= 0 and as_int(r["training_job_nsys_duration"]) >= 0,
            lambda: "training_job_nsys_delay and training_job_nsys_duration must be >= 0 seconds.",
        ),
        (
            bool(NSYS_ARGS.match(str(r["training_job_nsys_args"]))),
            lambda: (
                f"training_job_nsys_args '{r['training_job_nsys_args']}' may hold only nsys options "
                "(letters, "
                "digits, spaces and _ = , . : / + -): it is split into words on the command line."
            ),
        ),
        (
            bool(NSYS_BIN.match(str(r["training_job_nsys_bin"]))),
            lambda: (
                f"training_job_nsys_bin '{r['training_job_nsys_bin']}' must be a command name or path (no "
                "spaces or quotes)."
            ),
        ),
        (
            node_os == "" or bool(locks.OS_ID.match(node_os)),
            lambda: (
                f"training_job_node_os '{node_os}' must be a stack OS id such as ubuntu-24.04 or amzn-2023 "
                "(it names the nodes' lock)."
            ),
        ),
        (
            node_arch == "" or node_arch in locks.ARCHES,
            lambda: (
                f"training_job_node_arch '{node_arch}' must be one of {', '.join(locks.ARCHES)} or empty."
            ),
        ),
        (
            accept_torch == "" or bool(VERSION.match(accept_torch)),
            lambda: (
                f"training_job_accept_torch '{accept_torch}' must be a torch version as torch prints it "
                "(2.12.0+cu128), or empty."
            ),
        ),
    ]


def input_problems(request: Request, instance_types: Sequence[str]) -> list[str]:
    """What is wrong with the request on its own, one sentence per broken rule."""
    return [message() for ok, message in _input_rules(request, instance_types) if not ok]


def unknown_variables(names: Sequence[str], known: Sequence[str]) -> list[str]:
    """The ``training_job_*`` variables set that the role does not read (a typo would otherwise be "
    "ignored)."""
    return sorted(set(names) - set(known))


def nodes(request: Request, instance: Mapping[str, Any], node: Node) -> dict[str, Any]:
    """The nodes' GPUs, OS and architecture, and the lock target they take ('' when it cannot be told).

    The OS is the request's ``training_job_node_os``, else the launch host's (the nodes run the cluster's
    image); the architecture is the instance catalog's for a named type, else the request's, else the launch
    host's. Without GPUs the target is the lab's whatever the OS: its lock holds torch's CPU build.
    """
    gpus = as_int(instance.get("gpu_count") or 0)
    os_id = str(request.get("training_job_node_os") or node.get("os") or facts_os(node.get("facts") or {}))
    arch = str(instance.get("arch") or request.get("training_job_node_arch") or node.get("arch") or "")
    known = bool(locks.OS_ID.match(os_id)) and arch in locks.ARCHES  # a bad value is refused by input_rules
    target = locks.node_target(gpus, os_id, arch) if gpus <= 0 or known else ""
    return {"gpus": gpus, "os": os_id, "arch": arch, "target": target}


def facts_os(facts: Mapping[str, Any]) -> str:
    """The stack OS id of a host's distribution facts, '' when there are none or no stack knows them.

    Unknown is not an error here: a node without GPUs needs no OS (the lab's lock fits any), and a GPU node
    whose OS is unknown is refused by the lock rules, which say how to name it.
    """
    if not facts.get("distribution"):
        return ""
    try:
        return stack_resolver.os_id(facts)
    except stack_resolver.StackError:
        return ""


def _lock(catalog: str, testcase: str, target: str) -> tuple[str, str]:
    """The test case's lock file path for ``target`` and its text (both '' when the target is unknown)."""
    return locks.read_lock(catalog, testcase, target) if target else ("", "")


def _torch_found(node: Node) -> str | None:
    """The torch version the run's interpreter imports ('' for none), or None when it was not read."""
    found = node.get("torch")
    return None if found is None else str(found).strip()


def _lock_rules(
    r: Request, catalog: str, instance: Mapping[str, Any], node: Node, builds_venv: bool
) -> list[tuple[bool, Callable[[], str]]]:
    """(ok, message) of the rules about the nodes' lock: which one, that it exists, that the run's torch is
    the lock's (or accepted by name)."""
    testcase, itype = r["training_job_testcase"], r["training_job_instance_type"]
    where = nodes(r, instance, node)
    gpus, target = where["gpus"], where["target"]
    lock_file, lock = _lock(catalog, testcase, target)
    real_lock = os.path.realpath(lock_file) if lock_file else ""
    found = _torch_found(node)
    lock_torch = locks.torch_version(lock)
    accept = str(r.get("training_job_accept_torch", ""))
    catalog_arch, asked_arch = str(instance.get("arch") or ""), str(r.get("training_job_node_arch", ""))
    table = locks.gpu_table(catalog) if target and target != locks.LAB_TARGET else {"unresolvable": []}
    reason = locks.unresolvable_reason(table, testcase, target) if target else ""
    python = r["training_job_python"]
    return [
        (
            not asked_arch or not catalog_arch or asked_arch == catalog_arch,
            lambda: (
                f"training_job_node_arch is {asked_arch} but {itype} is {catalog_arch} (instance catalog): "
                "the lock is chosen by the nodes' architecture. Leave training_job_node_arch empty or name "
                "the instance type the nodes are."
            ),
        ),
        (
            bool(target) or not (builds_venv or found is not None),
            lambda: (
                f"{itype} has {gpus} GPU(s), so the nodes take their OS's GPU lock "
                "(requirements.gpu-<os>-<arch>.lock), but their "
                f"{'architecture' if locks.OS_ID.match(where['os']) else 'OS'} is unknown: set "
                "training_job_node_os (such as ubuntu-24.04) and training_job_node_arch, or launch from a "
                "host of the cluster's image."
            ),
        ),
        (
            not builds_venv or not target or target != locks.LAB_TARGET or os.path.isfile(lock_file),
            lambda: (
                f"Its virtualenv installs only hash-pinned requirements, from {real_lock}, which does not "
                "exist. "
                "Make it with `make testcase-locks` (scripts/testcase_lock.py "
                f"testcases/{testcase}/testcase.yml), or "
                "run with training_job_venv=false."
            ),
        ),
        (
            not builds_venv or not target or target == locks.LAB_TARGET or os.path.isfile(lock_file),
            lambda: (
                f"{itype} has {gpus} GPU(s) and the nodes run {where['os']} on {where['arch']}, so the "
                f"virtualenv installs the lock of target {target}, {real_lock}, which does not exist"
                f"{' (testcases/gpu_targets.yml: ' + reason.rstrip('.') + ')' if reason else ''}. "
                f"{testcase} has "
                f"{', '.join(locks.existing_locks(catalog, testcase)) or 'no lock'}. Make it with "
                f"`{locks.MAKE_COMMAND} TARGETS={target}`, or run with training_job_venv=false and a Python "
                "that holds the test case's requirements."
            ),
        ),
        (
            found is None or not lock_torch or found != "" or not lock,
            lambda: (
                f"training_job_python {python} cannot import torch, and {real_lock} (the lock of target "
                f"{target}) pins torch {lock_torch}. Run with the lock's virtualenv (training_job_venv=true) "
                "or a Python that has torch."
            ),
        ),
        (
            found is None
            or found == ""
            or not lock_torch
            or locks.public_version(found) == lock_torch
            or accept == found,
            lambda: (
                f"training_job_python {python} has torch {found}, but {real_lock} (the lock of target "
                f"{target}) pins torch {lock_torch}: the run would not use the torch {testcase} is locked "
                "to. Run with the lock's virtualenv (training_job_venv=true), or accept this torch with "
                f"training_job_accept_torch={found}"
                f"{f' (it names {accept})' if accept else ''}."
            ),
        ),
    ]


def request_problems(
    request: Request,
    manifest: Mapping[str, Any],
    catalog: str,
    instance: Mapping[str, Any],
    node: Node | None = None,
) -> list[str]:
    """What is wrong with the request for this test case: its launchers, includes, lock and configs."""
    r = request
    node = node or {}
    testcase, launcher, nodes_ = (
        r["training_job_testcase"],
        r["training_job_launcher"],
        r["training_job_nodes"],
    )
    includes = list(manifest.get("include") or [])
    builds_venv = as_bool(r["training_job_venv"]) and launcher != "kubernetes"
    target = nodes(r, instance, node)["target"]
    lock_file, lock = _lock(catalog, testcase, target)
    real_lock = os.path.realpath(lock_file) if lock_file else ""
    replaced = locks.replaced_names(locks.gpu_table(catalog), testcase, target) if target else []
    missing_pins = [
        pin
        for pin in manifest_pins(manifest.get("requirements") or [])
        if pin not in lock_pins(lock) and pin.split("==")[0] not in replaced
    ]
    config = r["training_job_args"].get("config")
    configs = list(manifest.get("configs") or [])
    rules: list[tuple[bool, Callable[[], str]]] = [
        (
            launcher in manifest["launchers"],
            lambda: (
                f"{testcase} cannot run with the {launcher} launcher; it supports "
                f"{', '.join(manifest['launchers'])}."
            ),
        ),
        (
            launcher != "local" or as_int(nodes_) == 1,
            lambda: f"The local launcher runs on one node (training_job_nodes={nodes_}).",
        ),
        (
            launcher == "slurm" or not r["training_job_nodelist"],
            lambda: f"training_job_nodelist names Slurm nodes; the {launcher} launcher cannot use it.",
        ),
        (
            all(INCLUDE.match(str(item)) and os.path.isdir(f"{catalog}/{item}") for item in includes),
            lambda: (
                f"The manifest's include {_shown(includes)} must list directories under testcases/ (such as "
                "common/trainstack_train), without '.' or '..' segments."
            ),
        ),
        *_lock_rules(r, catalog, instance, node, builds_venv),
        (
            not builds_venv or not lock or not missing_pins,
            lambda: (
                f"{real_lock} does not hold the manifest's pin(s) {', '.join(missing_pins)} (a lock must pin "
                "the "
                "manifest's versions). Make it again with `make testcase-locks`."
            ),
        ),
        (
            config is None or not configs or config in configs,
            lambda: (
                f"Unknown config {config if config is not None else ''} for {testcase}; known: "
                f"{', '.join(configs)}."
            ),
        ),
    ]
    return [message() for ok, message in rules if not ok]


def image_problems(request: Request, image: Mapping[str, Any], instance: Mapping[str, Any]) -> list[str]:
    """What makes the container image unfit for the cluster: no stack record, or CUDA the driver cannot run.

    ``image`` is what trainstack.cluster.container_image_info answered (empty when the registry was not read).
    """
    reference = request["training_job_container_image"]
    problems = list(image.get("problems") or [])
    image_cuda = image.get("image_cuda") or {}
    gpus = as_int(instance.get("gpu_count") or 0)
    rules: list[tuple[bool, Callable[[], str]]] = [
        (
            isinstance(image.get("record"), Mapping) or not image,
            lambda: (
                f"training_job_container_image {reference} carries no stack record (the manifest annotation "
                "org.trainstack.image.json that images built by trainstack.cluster.build_container have), so "
                "its CUDA "
                "cannot be checked against the nodes' NVIDIA driver. Use an image built by "
                "build_container.yml, or set "
                "training_job_container_unchecked=true to launch it unchecked."
            ),
        ),
        (
            not problems,
            lambda: (
                f"training_job_container_image {reference} needs a newer NVIDIA driver than the host's "
                f"{image.get('host_driver', '')} ({image.get('host_driver_source', '')}): "
                f"{'; '.join(str(p.get('message')) for p in problems)} (rule "
                f"{', '.join(dict.fromkeys(str(p.get('rule')) for p in problems))} of the version matrix: "
                f"{problems[0].get('citation', '') if problems else ''}). Use an image of the cluster's "
                "stack, or set "
                "training_job_container_unchecked=true if the image carries CUDA's forward-compatibility "
                "libraries."
            ),
        ),
        (
            not image_cuda
            or bool(image.get("host_driver"))
            or gpus == 0
            or request["training_job_launcher"] == "kubernetes",
            lambda: (
                f"training_job_container_image {reference} holds CUDA ({json.dumps(image_cuda)}) and "
                f"{request['training_job_instance_type']} has GPUs, but the launch host names no NVIDIA "
                "driver (no "
                "nvidia_driver in /etc/trainstack/image.json, no nvidia-smi), so the image cannot be checked "
                "against "
                "it. Launch from a host of the cluster's image, or set training_job_container_unchecked=true."
            ),
        ),
    ]
    return [message() for ok, message in rules if not ok]


def fabric(instance: Mapping[str, Any]) -> dict[str, Any]:
    """GPUs, EFA interfaces, GPUDirect RDMA and the NCCL/EFA environment of the instance type's catalog "
    "entry."""
    return {
        "gpus": instance.get("gpu_count") or 0,
        "efa": instance.get("efa_interfaces", 0),
        "gdr": instance.get("gpudirect_rdma", False),
        "env": dict(instance.get("env") or {}),
    }


def peak_environment(instance: Mapping[str, Any]) -> dict[str, str]:
    """The GPU's dense BF16 peak (the MFU denominator every test case reads) and its architecture (sm_XY).

    Absent when the catalog has none (the lab, ``local``): the summary then says MFU is unknown, and a test
    case that needs an architecture (fp8) refuses before it builds anything.
    """
    env: dict[str, str] = {}
    peak = instance.get("bf16_dense_flops")
    if isinstance(peak, (int, float)) and not isinstance(peak, bool):
        env["TRAINSTACK_GPU_PEAK_TFLOPS"] = str(round(peak / 1e12, 6))
    if isinstance(instance.get("gpu_arch"), str):
        env["TRAINSTACK_GPU_ARCH"] = instance["gpu_arch"]
    return env


def storage_problems(storage: Mapping[str, Any]) -> list[str]:
    """What is wrong with the cluster's storage defaults (keys of aws/cluster_tags.py, absolute paths)."""
    if not isinstance(storage, Mapping):
        return ["must be a mapping of data_dir and checkpoint_dir."]
    found = [
        f"has {key!r}, not one of {', '.join(cluster_tags.STORAGE_TAGS)}."
        for key in storage
        if key not in cluster_tags.STORAGE_TAGS
    ]
    for key, value in storage.items():
        problem = cluster_tags.path_problem(value) if key in cluster_tags.STORAGE_TAGS else ""
        if problem:
            found.append(f"{key} {value!r} {problem}.")
    return found


def storage_defaults(request: Request, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The cluster's data directory as the test case's ``data``, when its manifest has a ``data`` argument.

    Why only then: a test case whose manifest names no ``data`` either takes none or takes another kind (a
    JSONL file, hf/finetune's), and a directory would be the wrong thing to give it. The caller's own ``data``
    (training_job_args, null included) wins over this, as over the manifest's.
    """
    data_dir = (request.get("training_job_cluster_storage") or {}).get("data_dir")
    return {"data": data_dir} if data_dir and "data" in (manifest.get("arguments") or {}) else {}


def checkpoint_dir(request: Request, root: str) -> str:
    """The job's checkpoint directory: the caller's ``checkpoint-dir`` argument, else the job's directory
    under the cluster's checkpoint directory, else under the shared directory's ``trainstack/checkpoints``."""
    given = request["training_job_args"].get("checkpoint-dir")
    if given is not None:
        return str(given)
    base = (request.get("training_job_cluster_storage") or {}).get("checkpoint_dir") or f"{root}/checkpoints"
    return f"{base}/{request['training_job_name']}"


def arguments(request: Request, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The test case's default arguments, the cluster's storage defaults, then the caller's; a null value
    drops an argument."""
    merged = {
        **(manifest.get("arguments") or {}),
        **storage_defaults(request, manifest),
        **request["training_job_args"],
    }
    return {key: value for key, value in merged.items() if value is not None}


def command_line(args: Mapping[str, Any]) -> list[str]:
    """The arguments as the entrypoint's command line (``--key value`` pairs, values as strings)."""
    return [word for key, value in args.items() for word in (f"--{key}", str(value))]


def container(root: str, request: Request, image: Mapping[str, Any]) -> dict[str, str]:
    """How pyxis gets the image: the reference pinned to its digest, and the squashfs file of that digest.

    The digest keys the nodes' import cache on the shared filesystem. Without one (an unchecked image whose
    registry the launch host could not read) pyxis imports the reference itself on every node.
    """
    digest = str(image.get("digest") or "")
    return {
        "uri": f"docker://{image.get('pinned', request['training_job_container_image'])}",
        "sqsh": f"{root}/containers/{digest.replace(':', '-')}.sqsh" if digest else "",
    }


def ecr_region(image: Mapping[str, Any]) -> str:
    """The region of an Amazon ECR registry (``<account>.dkr.ecr.<region>.amazonaws.com[.cn]``), else ''."""
    registry = str((image.get("reference") or {}).get("registry", ""))
    match = ECR_REGISTRY.match(registry)
    return match.group(1) if match else ""


def baked_env(testcase: str, key: str, node: Node) -> str:
    """The path of the environment the nodes' image baked for this test case and key, or ''.

    ``node['envs']`` is image.json's ``testcase_envs`` on the launch host. Only an environment of the same key
    is taken: the key is the lock's text and the interpreter, so a match holds exactly what a build would.
    """
    for env in node.get("envs") or []:
        if isinstance(env, Mapping) and env.get("case") == testcase and env.get("key") == key:
            return str(env.get("path") or locks.baked_path(testcase, key))
    return ""


def venv_source(venv: bool, builds: bool, baked: str, venv_dir: str, r: Request) -> str:
    """Where the run's Python comes from, as the plan reports it: ``baked <path>``, ``build <path>`` or
    ``none (<interpreter>)``."""
    if baked:
        return f"baked {baked}"
    if builds:
        return f"build {venv_dir}"
    return f"none ({r['training_job_python']})" if not venv else f"none ({r['training_job_launcher']})"


def torch_record(r: Request, lock: str, node: Node) -> dict[str, Any]:
    """The lock's torch, the one the run's interpreter has (None when not read) and the accepted exception.

    ``accepted`` is set only when the found torch differs from the lock's and training_job_accept_torch names
    it: that is the exception a reader of the results must see.
    """
    found = _torch_found(node)
    lock_torch = locks.torch_version(lock)
    accept = str(r.get("training_job_accept_torch", ""))
    differs = bool(found) and bool(lock_torch) and locks.public_version(str(found)) != lock_torch
    return {"lock": lock_torch, "found": found, "accepted": accept if differs and accept == found else ""}


def torch_environment(torch: Mapping[str, Any]) -> dict[str, str]:
    """The ranks' variables that tell the run's summary a torch other than the lock's was accepted."""
    if not torch.get("accepted"):
        return {}
    return {"TRAINSTACK_TORCH_ACCEPTED": str(torch["accepted"]), "TRAINSTACK_TORCH_LOCK": str(torch["lock"])}


def launch_plan(
    request: Request,
    manifest: Mapping[str, Any],
    catalog: str,
    instance: Mapping[str, Any],
    image: Mapping[str, Any] | None = None,
    tmpdir: str = "",
    node: Node | None = None,
) -> dict[str, Any]:
    """Everything the role's tasks and templates need to stage, launch and collect this request."""
    r = request
    image, node = image or {}, node or {}
    testcase, flat = r["training_job_testcase"], locks.flat_name(str(r["training_job_testcase"]))
    root = f"{r['training_job_shared_dir']}/trainstack"
    venv = as_bool(r["training_job_venv"])
    where = nodes(r, instance, node)
    lock_file, lock = _lock(catalog, testcase, where["target"])
    venv_key = locks.venv_key(lock, str(r["training_job_python"]))
    baked = baked_env(testcase, venv_key, node) if venv and r["training_job_launcher"] != "kubernetes" else ""
    venv_dir = baked or f"{root}/venvs/{flat}-{venv_key}"
    builds_venv = venv and r["training_job_launcher"] != "kubernetes" and not baked
    torch = torch_record(r, lock, node)
    args = arguments(r, manifest)
    fabric_ = fabric(instance)
    environment = {
        **fabric_["env"],
        **peak_environment(instance),
        **(manifest.get("environment") or {}),
        **r["training_job_env"],
        **torch_environment(torch),
    }
    includes = list(manifest.get("include") or [])
    return {
        "root": root,
        "payload": f"{root}/testcases/{testcase}",
        "checkpoints": checkpoint_dir(r, root),
        "containers": f"{root}/containers",
        "local_tar": f"{tmpdir or '/tmp'}/trainstack-payload-{flat}.tar",
        # Each included package goes into the payload beside the entrypoint, under its own name.
        "payload_includes": [
            {"directory": f"{catalog}/{os.path.dirname(item)}", "name": os.path.basename(item)}
            for item in includes
        ],
        "builds_venv": builds_venv,
        "target": where["target"],
        "lock_file": lock_file,
        "lock_name": os.path.basename(lock_file),
        "lock": lock,
        "venv_key": venv_key,
        "venv_dir": venv_dir,
        "baked_venv": baked,
        "venv": venv_source(venv, builds_venv, baked, venv_dir, r),
        "torch": torch,
        "python": f"{venv_dir}/bin/python" if venv else r["training_job_python"],
        "arguments": args,
        "cli": command_line(args),
        "world_size": as_int(r["training_job_nodes"]) * as_int(r["training_job_procs_per_node"]),
        "fabric": fabric_,
        "environment": environment,
        "manifest": dict(manifest),
        "image": dict(image),
        "container": container(root, r, image),
        "ecr_region": ecr_region(image),
        "k8s_image_ref": r["training_job_k8s_image"]
        or image.get("pinned", r["training_job_container_image"]),
    }


ENTRYPOINT_OPTION = re.compile(r"(?<![\w-])--([a-z0-9][a-z0-9-]*)")


def entrypoint_options(help_text: str) -> list[str]:
    """The long options an entrypoint's ``--help`` names, in order of first mention."""
    return list(dict.fromkeys(ENTRYPOINT_OPTION.findall(help_text)))
