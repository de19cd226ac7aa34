# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The container build's flavour table and the layers it plans (playbooks/build_container.yml).

Why: a container image is a chain of layers, one per flavour, each on its parent's image. What a layer runs
(its roles: the flavour's own, or the image factory's flavour less the roles of its parent and of the host),
what it is named and tagged, and the ``layers`` list its stack record carries are rules a maintainer must be
able to step through and test; written as chains of Jinja filters in the playbook they were neither. The
playbook keeps the wiring (the files, lookups and digests of each layer's key) and calls these functions
through the filters of plugins/filter/container.py.

Every rule refuses before anything is built, naming the variable and the key: a layer that fails half-way
through a build leaves a working container behind and costs the parents' build time.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

# The keys a flavour of container_image_flavours takes.
FLAVOUR_KEYS = ("parent", "image_flavour", "roles", "gpu", "vars", "testcases")
# A path component of an image name, as registries require (distribution's reference grammar).
REFERENCE_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
# An image tag: the stack id, and the stack id with the key's first 12 characters.
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
KEY_PREFIX = 12
# The roles every layer runs besides its own (image_prepare resolves the stack, image_manifest writes
# image.json, image_selfcheck generalises, artifact downloads): their files are in every layer's key.
SUPPORT_ROLES = ("image_prepare", "image_manifest", "image_selfcheck", "artifact")
# What every layer's key covers besides the roles: the collection's plugins and the root filesystem template.
KEY_DIRS = ("plugins", "packer/lxc")
# The variable naming the source mirror's lock, and the rule a lock meets, for the messages.
MIRROR_LOCK_VAR = "container_source_mirror_lock"
MIRROR_LOCK_RULE = (
    'a lock file on the controller with an artifacts mapping ({"artifacts": {name: {url, sha256}}}), or empty'
)


class ContainerFlavourError(ValueError):
    """A flavour table or a request that no layer can be planned from, every problem named."""


def _listing(table: Mapping[str, Any]) -> str:
    return ", ".join(str(name) for name in table)


def request_problems(requested: Any, table: Mapping[str, Any]) -> list[str]:
    """Why ``container_flavours`` cannot be built ([] when it can): a non-empty list of the table's
    flavours, each named once (a name given twice is a slip, most often of another name)."""
    if isinstance(requested, (str, bytes)) or not isinstance(requested, Sequence) or not requested:
        return [f"container_flavours must be a non-empty list of flavours ({_listing(table)})"]
    problems = []
    unknown = [str(name) for name in requested if name not in table]
    if unknown:
        problems.append(
            f"container_flavours: {', '.join(unknown)} is not a container flavour (one of {_listing(table)})"
        )
    twice = sorted({str(name) for name in requested if list(requested).count(name) > 1})
    if twice:
        problems.append(f"container_flavours: {', '.join(twice)} is named more than once")
    return problems


def _role_problems(name: str, roles: Any) -> list[str]:
    """A flavour's own roles: a list of {role, components}, each role once (a layer runs a role once)."""
    where = f"container_image_flavours.{name}.roles"
    if not isinstance(roles, list) or not all(
        isinstance(entry, Mapping) and isinstance(entry.get("role"), str) and entry.get("role")
        for entry in roles
    ):
        return [
            f"{where}: a list of {{role, components}} (the role's name and the stack components it installs)"
        ]
    problems = []
    for entry in roles:
        extra = sorted(set(entry) - {"role", "components"})
        if extra:
            problems.append(f"{where}: {entry['role']} takes role and components, not {', '.join(extra)}")
        components = entry.get("components", [])
        if not isinstance(components, list) or not all(isinstance(c, str) for c in components):
            problems.append(f"{where}: {entry['role']}.components must be a list of component names")
    names = [entry["role"] for entry in roles]
    twice = sorted({role for role in names if names.count(role) > 1})
    if twice:
        problems.append(f"{where}: {', '.join(twice)} is listed more than once")
    return problems


def _entry_problems(name: str, entry: Any, factory: Mapping[str, Any]) -> list[str]:
    """One flavour's own rules: known keys, roles named one way or the other, typed values."""
    where = f"container_image_flavours.{name}"
    if not isinstance(entry, Mapping):
        return [f"{where}: a flavour is a mapping of {', '.join(FLAVOUR_KEYS)}"]
    problems = []
    unknown = sorted(str(key) for key in entry if key not in FLAVOUR_KEYS)
    if unknown:
        problems.append(
            "container_image_flavours: a flavour takes parent, image_flavour or roles, gpu, vars and "
            f"testcases (unknown keys are refused: {name} has {', '.join(unknown)})"
        )
    if not re.fullmatch(REFERENCE_COMPONENT, str(name)):
        problems.append(
            f"{where}: a flavour's name is part of its image's name: lowercase [a-z0-9], separated by '.', "
            "'_', '__' or '-'"
        )
    if "image_flavour" not in entry and "roles" not in entry:
        problems.append(
            "container_image_flavours: every flavour names its roles (roles) or the image factory's flavour "
            f"it takes them from (image_flavour); {name} names neither"
        )
    if "roles" in entry:
        problems.extend(_role_problems(name, entry["roles"]))
    elif "image_flavour" in entry and entry["image_flavour"] not in factory:
        problems.append(
            f"{where}.image_flavour: {entry['image_flavour']} is not a flavour of the image factory "
            f"(build_image.yml's image_flavours: {_listing(factory)})"
        )
    if not isinstance(entry.get("gpu", False), bool):
        problems.append(f"{where}.gpu: true or false")
    if not isinstance(entry.get("vars", {}), Mapping):
        problems.append(f"{where}.vars: a mapping of the variables handed to its roles")
    cases = entry.get("testcases", [])
    if not isinstance(cases, list) or not all(isinstance(c, str) for c in cases):
        problems.append(f"{where}.testcases: a list of test cases (<framework>/<case>)")
    elif cases and not entry.get("gpu", False):
        problems.append(f"{where}.testcases: only a gpu flavour bakes test case environments (set gpu: true)")
    return problems


def table_problems(table: Any, factory: Mapping[str, Any]) -> list[str]:
    """Why ``container_image_flavours`` plans no layers ([] when it does). The table's order is the build
    order, so a parent must exist and come before its children; ``factory`` is build_image.yml's
    image_flavours, whose flavours an ``image_flavour`` names."""
    if not isinstance(table, Mapping) or not table:
        return ["container_image_flavours must be a non-empty mapping of flavour -> {parent, roles, ...}"]
    problems = []
    names = list(table)
    for name, entry in table.items():
        problems.extend(_entry_problems(str(name), entry, factory))
        parent = entry.get("parent", "") if isinstance(entry, Mapping) else ""
        if parent and parent not in table:
            problems.append(
                f"container_image_flavours names a parent that is not one of its flavours "
                f"({name}.parent: {parent}; the flavours are {_listing(table)})"
            )
        elif parent and names.index(parent) > names.index(name):
            problems.append(f"container_image_flavours: {name} is listed before its parent {parent}")
    return problems


def testcase_problems(
    table: Mapping[str, Any],
    chain: Sequence[str],
    known: Sequence[str],
    unbaked: Mapping[str, str],
    target: str,
) -> list[str]:
    """Why a test case flavour of ``chain`` could not bake its cases ([] when it can): each case is one of
    the catalog's (``known``) and has an environment for the containers' GPU target (``unbaked``: case -> the
    reason it has none, as module_utils/launch/locks.py gives it). Refused here rather than when the layer is
    reached, after its parents' build; only the flavours to build are judged, as only they need the target's
    locks."""
    problems = []
    for name in chain:
        entry = table[name]
        for case in entry.get("testcases") or []:
            if case not in known:
                problems.append(
                    f"container_image_flavours.{name}.testcases: {case} is not a test case of the catalog "
                    f"({', '.join(known)})"
                )
            elif case in unbaked:
                problems.append(
                    f"container_image_flavours.{name}.testcases: {case} has no environment for {target} "
                    f"({unbaked[case]})"
                )
    return problems


def _lock_document(path: str) -> tuple[Any, str]:
    """The parsed JSON of the lock at ``path`` and "", or None and why it cannot be read."""
    if not os.path.isfile(path):
        return None, "there is no file at that path"
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle), ""
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"it cannot be read ({exc})"
    except ValueError as exc:
        return None, f"it is not JSON ({exc})"


def _lock_shape_problem(document: Any) -> str:
    """Why a parsed lock holds no artifacts mapping ("" when it does)."""
    if not isinstance(document, Mapping):
        return f"it holds a {type(document).__name__}, not a mapping"
    if "artifacts" not in document:
        return "it has no artifacts key"
    if not isinstance(document["artifacts"], Mapping):
        return f"its artifacts is a {type(document['artifacts']).__name__}, not a mapping"
    return ""


def source_mirror_lock(path: Any) -> dict[str, Any]:
    """``{"artifacts": name -> {url, sha256}, "problems": [...]}`` of ``container_source_mirror_lock``, read
    once: its artifacts vouch for downloads the stack does not pin and are part of the CUDA layers' keys, so
    a lock that holds none must be refused with the other inputs, before a layer is planned, not found out
    when a download has no sha256 to be checked against. An empty path is no lock ({} artifacts); a
    relative path is the controller's working directory's."""
    if not isinstance(path, str):
        return {
            "artifacts": {},
            "problems": [f"{MIRROR_LOCK_VAR}: {MIRROR_LOCK_RULE}; got a {type(path).__name__}"],
        }
    if not path:
        return {"artifacts": {}, "problems": []}
    document, why = _lock_document(path)
    why = why or _lock_shape_problem(document)
    if why:
        return {"artifacts": {}, "problems": [f"{MIRROR_LOCK_VAR}={path}: {MIRROR_LOCK_RULE}; {why}"]}
    return {"artifacts": dict(document["artifacts"]), "problems": []}


def check_request(table: Any, requested: Any, factory: Mapping[str, Any]) -> list[str]:
    """Every problem of the table and of the request ([] when the layers can be planned). The request is
    judged against a table that is sound, so that its message lists real flavours."""
    return table_problems(table, factory) or request_problems(requested, table)


def build_chain(table: Mapping[str, Any], requested: Sequence[str]) -> list[str]:
    """The flavours to build, in the table's order: the requested ones and their ancestors."""
    needed: set[str] = set()
    for name in requested:
        while name and name not in needed:
            needed.add(name)
            name = table[name].get("parent", "")
    return [name for name in table if name in needed]


def layer_roles(
    table: Mapping[str, Any], chain: Sequence[str], factory: Mapping[str, Any], host_roles: Sequence[str]
) -> dict[str, list[dict[str, Any]]]:
    """The roles each layer of ``chain`` runs: a flavour's own ``roles`` as named, else its image factory
    flavour's (flattened), less the host's (the driver, the daemons: a container never carries them) and
    less its parent's layer's (already in the parent image)."""
    roles: dict[str, list[dict[str, Any]]] = {}
    for name in chain:
        entry = table[name]
        if "roles" in entry:
            roles[name] = [dict(role) for role in entry["roles"]]
            continue
        parents = {role["role"] for role in roles.get(entry.get("parent", ""), [])}
        roles[name] = [
            dict(role)
            for role in _flatten(factory[entry["image_flavour"]])
            if role["role"] not in host_roles and role["role"] not in parents
        ]
    return roles


def _flatten(items: Any) -> list[Any]:
    """Jinja's ``flatten``: the factory's flavours are lists of role lists (one per group of roles)."""
    if not isinstance(items, list):
        return [items]
    return [leaf for item in items for leaf in _flatten(item)]


def plan_roles(
    table: Mapping[str, Any],
    requested: Sequence[str],
    factory: Mapping[str, Any],
    host_roles: Sequence[str],
) -> dict[str, Any]:
    """``{"chain": the flavours to build, "roles": flavour -> its layer's roles}``; raises
    ContainerFlavourError with every problem of the table and the request."""
    problems = check_request(table, requested, factory)
    if problems:
        raise ContainerFlavourError("; ".join(problems))
    chain = build_chain(table, requested)
    roles = layer_roles(table, chain, factory, host_roles)
    return {"chain": chain, "roles": roles, "key_dirs": key_dirs([r for own in roles.values() for r in own])}


def key_dirs(roles: Sequence[Mapping[str, Any]]) -> list[str]:
    """The directories (relative to the repository, no trailing '/') whose files a layer running ``roles`` is
    keyed by: a change to one of them must build the layer again; a change elsewhere must not."""
    names = _unique([*(str(role["role"]) for role in roles), *SUPPORT_ROLES])
    return [*KEY_DIRS, *(f"roles/{name}" for name in names)]


def layer_key_inputs(
    table: Mapping[str, Any],
    name: str,
    roles: Mapping[str, Sequence[Mapping[str, Any]]],
    keys: Mapping[str, str],
    files: Sequence[Mapping[str, Any]],
    root: str,
    settings: Mapping[str, Any],
    wheels: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """What the key of layer ``name`` is a digest of, less what the playbook looks up (the stack, its lock,
    the layer playbook's digest): the flavour's entry and roles, its parent's key (so a parent's change
    rebuilds its children), the checksums of the files its roles and the plugins hold (``files``: the find
    results under ``root``), and the settings that change what it installs.

    ``settings``: artifact_mirror_url, host_ca_certs, cuda_archs, source_mirror and source_mirror_artifacts
    (a gpu layer's only; the last, the sha256s of the source mirror's own lock, which vouch for a download the
    stack does not pin, such as a mirror's EFA installer: other bytes must build the layer again; {} when
    absent), rootfs (the first layer's: the Debian suite and mirror), pytorch_wheelhouse (the wheels' names
    and sizes count when the layer runs pytorch from a wheelhouse, ``wheels`` being that directory's find
    results).
    """
    entry = table[name]
    own = roles[name]
    prefixes = tuple(f"{directory}/" for directory in key_dirs(own))
    covered = sorted(
        [os.path.relpath(str(found["path"]), root), found["checksum"]]
        for found in files
        if os.path.relpath(str(found["path"]), root).startswith(prefixes)
    )
    gpu = bool(entry.get("gpu"))
    wheelhouse = (entry.get("vars") or {}).get("pytorch_wheelhouse", settings["pytorch_wheelhouse"])
    runs_pytorch = "pytorch" in [role["role"] for role in own]
    return {
        "flavour": name,
        "entry": {key: value for key, value in entry.items() if key != "parent"},
        "roles": [dict(role) for role in own],
        "parent": keys.get(entry.get("parent", ""), ""),
        "files": covered,
        "variables": {
            "artifact_mirror_url": settings["artifact_mirror_url"],
            "host_ca_certs": bool(settings["host_ca_certs"]),
            "cuda_archs": list(settings["cuda_archs"]) if gpu else [],
            "source_mirror": settings["source_mirror"] if gpu else "",
            "source_mirror_artifacts": dict(settings.get("source_mirror_artifacts") or {}) if gpu else {},
            "rootfs": list(settings["rootfs"]) if not entry.get("parent") else [],
            "wheels": sorted([os.path.basename(str(w["path"])), w["size"]] for w in wheels)
            if runs_pytorch and len(wheelhouse) > 0
            else [],
        },
    }


def _unique(items: Sequence[Any]) -> list[Any]:
    """Jinja's ``unique`` on dicts and lists: the first of equal items, in order."""
    out: list[Any] = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def plan_layers(
    table: Mapping[str, Any],
    chain: Sequence[str],
    roles: Mapping[str, Sequence[Mapping[str, Any]]],
    keys: Mapping[str, str],
    repository: str,
    stack_id: str,
) -> dict[str, dict[str, Any]]:
    """Each layer of ``chain`` named, tagged and placed on its parent's image (the layer playbook's
    ``container_plan``).

    A layer's image is ``localhost/<repository>/<flavour>:<stack>-<key[:12]>``, tagged with that content tag
    and the stack's id; ``chain_roles`` (its parents' roles and its own: what image_prepare resolves) and
    ``gpu_components`` (what a gpu layer and its gpu parents install from the stack's GPU line) accumulate
    down the chain, as does ``layers``, the list of images its stack record names, base first. Raises
    ContainerFlavourError when the stack id makes no valid tag.
    """
    plan: dict[str, dict[str, Any]] = {}
    for name in chain:
        entry = table[name]
        parent = plan.get(entry.get("parent", "")) or {}
        key = keys[name]
        tag = f"{stack_id}-{key[:KEY_PREFIX]}"
        own = [dict(role) for role in roles[name]]
        gpu = bool(entry.get("gpu", False))
        components = [c for role in own for c in role.get("components", [])] if gpu else []
        plan[name] = {
            "flavour": name,
            "key": key,
            "name": f"{repository}/{name}",
            "image": f"localhost/{repository}/{name}:{tag}",
            "tags": [tag, stack_id],
            "parent": parent.get("image", "scratch"),
            "roles": own,
            "chain_roles": _unique([*parent.get("chain_roles", []), *own]),
            "gpu_components": _unique([*parent.get("gpu_components", []), *components]),
            "layers": [
                *parent.get("layers", []),
                {"flavour": name, "key": key, "image": f"{repository}/{name}:{tag}"},
            ],
            "gpu": gpu,
            "vars": dict(entry.get("vars") or {}),
            "testcases": list(entry.get("testcases") or []),
            "working": f"trainstack-build-{name}",
        }
    bad = sorted({t for layer in plan.values() for t in layer["tags"] if not TAG.match(t)})
    if bad:
        raise ContainerFlavourError(
            f"trainstack_stack={stack_id}: an image tag is [A-Za-z0-9_] then up to 127 of [A-Za-z0-9_.-] "
            f"({', '.join(bad)})"
        )
    return plan
