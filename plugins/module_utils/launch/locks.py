# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Which of a test case's locks a node installs, and the key of the virtualenv made from it.

A test case carries one lock per target beside its manifest: ``requirements.lock`` for the lab (CPython 3.11,
torch's CPU build) and ``requirements.gpu-<os>-<arch>.lock`` for each OS and architecture the stack builds GPU
images for. The rule that names them lives here, once: scripts/testcase_lock.py writes the files under these
names, the launch plan picks one for the nodes it runs on, and an image build bakes the same one. The
virtualenv key is here for the same reason: a launch finds an environment baked into the image only if the
build computed the key the launch computes, from the same lock text and interpreter.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..files import strict_yaml

LAB_TARGET = "lab"
LOCK_NAME = "requirements.lock"
MAKE_COMMAND = "make testcase-locks"
GPU_TABLE = "gpu_targets.yml"
# Where an image keeps the test cases' environments it was built with: <BAKED_ROOT>/<case>-<key>.
BAKED_ROOT = "/opt/trainstack/envs"
TARGET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*[a-z0-9]$")
OS_ID = re.compile(r"^[a-z][a-z0-9]*-[0-9][0-9.]*$")
ARCHES = ("x86_64", "aarch64")
TORCH_PIN = re.compile(r"(?m)^torch==([^\s+;\\]+)")
KEY_LENGTH = 16


def lock_name(target: str = LAB_TARGET) -> str:
    """The file name of a test case's lock for ``target``: ``requirements.lock`` for the lab,
    ``requirements.<target>.lock`` for another (``gpu-ubuntu-24.04-x86_64``). Pure: no file is read.

    A target name becomes part of a file name, so one that could leave the directory is refused.
    """
    if target == LAB_TARGET:
        return LOCK_NAME
    if not TARGET_RE.match(target) or ".." in target or target.endswith(".lock"):
        raise ValueError(f"testcase_lock: '{target}' is not a target name (such as gpu-ubuntu-24.04-x86_64)")
    return f"requirements.{target}.lock"


def gpu_target(os_id: str, arch: str) -> str:
    """The GPU target of nodes running ``os_id`` (a stack OS id, ``ubuntu-24.04``) on ``arch``."""
    return f"gpu-{os_id}-{arch}"


def node_target(gpus: int, os_id: str, arch: str) -> str:
    """The target whose lock a node installs: the lab's (CPU torch) without GPUs, else its OS's GPU lock.

    A node without GPUs takes the lab's lock whatever its OS: that lock is the CPU build, the one torch that
    runs there; a GPU node needs torch's CUDA build for its OS's Python and its architecture.
    """
    return LAB_TARGET if gpus <= 0 else gpu_target(os_id, arch)


def venv_key(lock: str, python: str) -> str:
    """The virtualenv's key: what it holds (the lock's text) and what runs it (the interpreter's path)."""
    return hashlib.sha256((lock + python).encode("utf-8")).hexdigest()[:KEY_LENGTH]


def flat_name(testcase: str) -> str:
    """``pytorch/fsdp`` as one path segment (``pytorch-fsdp``)."""
    return testcase.replace("/", "-")


def baked_path(testcase: str, key: str, root: str = BAKED_ROOT) -> str:
    """Where an image holds the environment of ``testcase`` with ``key``."""
    return f"{root}/{flat_name(testcase)}-{key}"


def existing_locks(catalog: str, testcase: str) -> list[str]:
    """The lock files a test case has (file names, sorted): what a refusal lists as the choices."""
    found = glob.glob(os.path.join(catalog, testcase, "requirements*.lock"))
    return sorted(os.path.basename(path) for path in found)


def read_lock(catalog: str, testcase: str, target: str) -> tuple[str, str]:
    """The path of the test case's lock for ``target`` and its text ('' when there is none)."""
    path = f"{catalog}/{testcase}/{lock_name(target)}"
    if not os.path.isfile(path):
        return path, ""
    with open(path, encoding="utf-8") as handle:
        return path, handle.read()


def torch_version(lock: str) -> str:
    """The torch version a lock pins, without its local label (``2.13.0`` of ``2.13.0+cpu``); '' if none."""
    match = TORCH_PIN.search(lock)
    return match.group(1) if match else ""


def public_version(version: str) -> str:
    """A version without its local label: ``2.13.0+cu130`` and ``2.13.0+cpu`` are both torch 2.13.0."""
    return version.split("+", 1)[0].strip()


def gpu_table(catalog: str) -> dict[str, Any]:
    """testcases/gpu_targets.yml: extras, replaced pins and pairs without a lock (empty parts when absent)."""
    path = os.path.join(catalog, GPU_TABLE)
    body = strict_yaml.load(path) if os.path.isfile(path) else {}
    body = body or {}
    return {
        "extras": body.get("extras") or {},
        "replaced_pins": body.get("replaced_pins") or {},
        "unresolvable": body.get("unresolvable") or [],
    }


def unresolvable_reason(table: Mapping[str, Any], testcase: str, target: str) -> str:
    """Why gpu_targets.yml says ``testcase`` has no lock for ``target`` ('' when it does not say so)."""
    for entry in table["unresolvable"]:
        if testcase in entry.get("cases", []) and target in entry.get("targets", []):
            return " ".join(str(entry.get("reason", "")).split())
    return ""


def replaced_names(table: Mapping[str, Any], testcase: str, target: str) -> list[str]:
    """Package names whose manifest pin a GPU target's lock replaces (the lab's lock replaces none)."""
    if target == LAB_TARGET:
        return []
    return sorted(str(name) for name in (table["replaced_pins"].get(testcase) or {}))


def catalog_testcases(catalog: str) -> list[str]:
    """The test cases of the catalog: ``<framework>/<case>`` directories that hold a testcase.yml."""
    found = glob.glob(os.path.join(catalog, "*", "*", "testcase.yml"))
    return sorted(os.path.relpath(os.path.dirname(path), catalog) for path in found)


def image_target(os_id: str, arch: str, lab_os: Sequence[str]) -> str:
    """The target an image's environments are baked for: the lab's on the lab's OS (the local image, whose
    nodes have no GPU), else the GPU target of the image's OS and architecture."""
    return LAB_TARGET if os_id in lab_os else gpu_target(os_id, arch)


LOCK_LINE = re.compile(r"(?m)^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
DIST_FILE = re.compile(r"^(?P<name>.+?)-(?P<version>[0-9][^-]*?)(-.*\.whl|\.tar\.gz|\.zip)$")


def _dist_key(name: str, version: str) -> tuple[str, str]:
    """A distribution as file names and pins both spell it: name normalised (PEP 503), version without its
    local label."""
    return re.sub(r"[-_.]+", "-", name).lower(), public_version(version)


def wheelhouse_missing(lock: str, files: Sequence[str]) -> list[str]:
    """The lock's pins for which the wheelhouse (its file names) holds no file: an offline install of the
    lock there would fail, so a build says so before it starts one."""
    held = {_dist_key(m["name"], m["version"]) for m in map(DIST_FILE.match, files) if m}
    return [
        f"{name}=={version}"
        for name, version in LOCK_LINE.findall(lock)
        if _dist_key(name, version) not in held
    ]


# A lock's note on a pin PyPI publishes as source only (scripts/testcase_lock.py writes it): the hash is that
# of a wheel built once into a wheelhouse, so no package index serves the file the lock pins.
SOURCE_ONLY_NOTE = re.compile(r"(?m)^# (\S+==\S+): PyPI has its source only;")


def source_only_pins(lock: str) -> list[str]:
    """The lock's pins whose pinned file is a wheel built from source: an install from a package index fails
    their hash check, so only a wheelhouse can install the lock."""
    return SOURCE_ONLY_NOTE.findall(lock)


def _skip_reason(lock: str, wheelhouse: Sequence[str] | None) -> str:
    """Why a build cannot install ``lock`` from ``wheelhouse`` (None: the package index), or ''."""
    if wheelhouse is None:
        built = source_only_pins(lock)
        return (
            f"{', '.join(built)} is built from source into a wheelhouse (pytorch_wheelhouse), and this build "
            "installs from the package index"
            if built
            else ""
        )
    missing = wheelhouse_missing(lock, wheelhouse)
    if not missing:
        return ""
    more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
    return f"the wheelhouse holds no file of {', '.join(missing[:3])}{more}"


def baked_envs(
    catalog: str,
    testcases: Sequence[str],
    target: str,
    python: str,
    root: str = BAKED_ROOT,
    wheelhouse: Sequence[str] | None = None,
) -> dict[str, list[dict[str, str]]]:
    """What an image build bakes for ``testcases`` on ``target``: one entry per test case with a lock there
    (``bake``: case, target, lock file, lock name, key, path, torch), and the ones it cannot (``skipped``:
    case, target, reason), so image.json says why a listed case has no environment.

    ``wheelhouse`` (the file names of the wheelhouse an offline build installs from; None: the package index)
    skips a case whose lock it does not hold, naming the first missing pins: the lab's wheelhouse holds the
    cases of ``make wheelhouse``, not those of ``make wheelhouse-slow``. Without one, a case whose lock pins a
    wheel built from source (:func:`source_only_pins`) is skipped: no index serves that file.

    Unknown test cases raise ValueError naming the catalog's: a typo in a flavour must fail the build before
    anything is installed.
    """
    known = catalog_testcases(catalog)
    unknown = [case for case in testcases if case not in known]
    if unknown:
        raise ValueError(
            f"pytorch_testcases names unknown test case(s) {', '.join(unknown)}; the catalog has "
            f"{', '.join(known)}."
        )
    table = gpu_table(catalog)
    bake: list[dict[str, str]] = []
    skipped: list[dict[str, str]] = []
    for case in dict.fromkeys(testcases):
        path, lock = read_lock(catalog, case, target)
        if not lock:
            reason = unresolvable_reason(table, case, target) or f"{case} has no {lock_name(target)}"
            skipped.append({"case": case, "target": target, "reason": reason})
            continue
        reason = _skip_reason(lock, wheelhouse)
        if reason:
            skipped.append({"case": case, "target": target, "reason": reason})
            continue
        key = venv_key(lock, python)
        bake.append(
            {
                "case": case,
                "target": target,
                "lock_file": path,
                "lock_name": lock_name(target),
                "key": key,
                "path": baked_path(case, key, root),
                "python": python,
                "torch": torch_version(lock),
            }
        )
    return {"bake": bake, "skipped": skipped}
