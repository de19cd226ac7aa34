# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Filters that read a stack for one host: which versions and which downloads apply to it.

Why filters: roles (NVIDIA, EFA, Slurm...) take their defaults from the stack; a filter keeps the OS/arch
resolution in module_utils/stack/stack_matrix instead of re-implementing `by_os` merging in Jinja.
"""

from __future__ import annotations

import re
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.trainstack.cluster.plugins.module_utils.artifact.artifact_fetch import mirror_path
from ansible_collections.trainstack.cluster.plugins.module_utils.image.stages import unpinned_components
from ansible_collections.trainstack.cluster.plugins.module_utils.stack.stack_matrix import (
    StackError,
    all_artifacts,
    artifacts,
    environment,
    resolve,
    unverified_artifacts,
    version_matches,
    versions,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.stack.stack_resolver import os_id

# A dotted release and, right after it, a local build label (torch's "2.13.0+cpu"), kept: it says which build.
_VERSION_RE = re.compile(r"\d+(?:\.\d+)+(?:\+[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?")


def stack_os_id(facts: dict[str, Any]) -> str:
    """Stack OS id from Ansible facts (stack_resolver.os_id): Ubuntu keeps 'major.minor' (22.04), others use
    the major version."""
    try:
        return os_id(facts)
    except StackError as exc:
        raise AnsibleFilterError(f"stack_os_id: {exc}") from exc


def _guard(func: Any, *args: Any) -> Any:
    try:
        return func(*args)
    except StackError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def stack_versions(stack: dict[str, Any], os_id: str, arch: str) -> dict[str, str]:
    """{component: version} for one OS/arch."""
    return _guard(versions, stack, os_id, arch)


def stack_components(stack: dict[str, Any], os_id: str, arch: str) -> dict[str, dict[str, Any]]:
    """Resolved component records (by_os merged, other arches' artifacts dropped)."""
    return _guard(resolve, stack, os_id, arch)


def stack_artifacts(stack: dict[str, Any], os_id: str, arch: str) -> list[dict[str, Any]]:
    """Artifacts (name, url, sha256, component) one OS/arch downloads."""
    return _guard(artifacts, stack, os_id, arch)


def stack_all_artifacts(stack: dict[str, Any]) -> list[dict[str, Any]]:
    """Every artifact over the stack's whole scope (what `make mirror` fetches)."""
    return _guard(all_artifacts, stack)


def stack_unverified_artifacts(stack: dict[str, Any], os_id: str, arch: str) -> list[dict[str, Any]]:
    """Artifacts one OS/arch installs unchecked because their stack entry says `verify: false` (with why):
    what the build prints and image.json records."""
    return _guard(unverified_artifacts, stack, os_id, arch)


def stack_version_matches(installed: Any, pinned: Any) -> bool:
    """Whether an installed version is the pinned one ('13.2.1' is CUDA '13.2'; '2.13.0+cpu' is '2.13.0')."""
    return _guard(version_matches, installed, pinned)


def stack_first_version(text: Any) -> str | None:
    """First dotted number in a probe's output ('slurm 22.05.8' -> '22.05.8', '2.13.0+cpu' kept whole), None
    when there is none."""
    match = _VERSION_RE.search(str(text or ""))
    return match.group(0) if match else None


def stack_manifest_components(results: list[dict[str, Any]], pinned: dict[str, Any]) -> dict[str, Any]:
    """{component: {pinned, installed, matches}} from the manifest role's probe results.

    Why a filter: zipping loop results with the pins in Jinja is unreadable, and the version parsing must be
    the one the checker uses.
    """
    out: dict[str, Any] = {}
    for result in results:
        name = result["item"]
        installed = stack_first_version(result.get("stdout"))
        want = pinned.get(name)
        out[name] = {
            "pinned": None if want is None else str(want),
            "installed": installed,
            "matches": installed is not None and want is not None and version_matches(installed, want),
        }
    return out


def stack_selfcheck_versions(components: dict[str, Any], required: list[str]) -> list[dict[str, str]]:
    """One check per component of image.json: installed must equal the stack's pin; required ones must exist.

    A pinned component no role of this build installs is a skip (not a failure), so an image built before a
    role exists still says what it lacks.
    """
    checks = []
    for name, record in sorted(components.items()):
        installed, pinned = record.get("installed"), record.get("pinned")
        if installed is None:
            status = "fail" if name in required else "skip"
            detail = "not installed" + ("" if name in required else " (no role in this build installs it)")
        elif version_matches(installed, pinned):
            status, detail = "pass", f"{installed} (stack pins {pinned})"
        else:
            status, detail = "fail", f"installed {installed}, stack pins {pinned}"
        checks.append({"check": f"version:{name}", "status": status, "detail": detail})
    for name in sorted(set(required) - set(components)):
        checks.append(
            {"check": f"version:{name}", "status": "fail", "detail": "not pinned by the stack for this OS"}
        )
    return checks


def stack_selfcheck_line(check: dict[str, str]) -> str:
    """'FAIL version:nccl: installed 2.28.9, stack pins 2.29.7' for terminal output."""
    return f"{check['status'].upper():4} {check['check']}: {check['detail']}"


def stack_artifact_path(artifact: dict[str, Any]) -> str:
    """Relative path of an artifact in a cache or mirror: '<name>/<file>' (artifact_fetch.mirror_path).

    Why not Jinja's urldecode: it turns '+' into a space (form decoding), and Debian file names carry '+'.
    """
    return mirror_path(artifact["name"], artifact["url"])


def stack_environment(
    stack: dict[str, Any], rules: list[dict[str, Any]], os_id: str, arch: str, family: str | None = None
) -> dict[str, str]:
    """FI_*/NCCL_* job environment for one target (stack_matrix.environment): what the efa role's profile
    exports, computed by the same rules the checker applies."""
    return _guard(environment, stack, rules, os_id, arch, family or None)


_IMAGE_ENTRY_KEYS = {"role", "components"}


def _image_role_error(entry: Any, present: set[str], roles: set[str]) -> str | None:
    """Why an image role entry cannot be applied at all (a typo must not build an image without the role)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("role"), str):
        return f"each entry must be a mapping with a role name, got {entry!r}"
    extra = sorted(set(entry) - _IMAGE_ENTRY_KEYS)
    if extra:
        return (
            f"role {entry['role']}: unknown key {', '.join(extra)} (entries take role and components; every "
            "role is applied through its install entry point)"
        )
    if entry["role"] not in roles:
        return f"role {entry['role']} is not a role of this collection (roles: {', '.join(sorted(roles))})"
    if f"{entry['role']}/tasks/install.yml" not in present:
        return f"role {entry['role']} has no install entry point (roles/{entry['role']}/tasks/install.yml)"
    return None


def stack_image_roles(
    entries: list[dict[str, Any]], task_files: list[str], pinned: dict[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    """Split a flavour's role list into what a build applies (through each role's install entry point) and
    what it skips, with the reason.

    A role is skipped only when the stack leaves unpinned a component it installs for this OS/arch (no NVIDIA
    driver on the Debian lab image). A role name that is not in the collection, or a role
    without tasks/install.yml, is an error naming it: skipping it would build an image that silently lacks it.
    `task_files` are paths ending in '<role>/tasks/<file>.yml'.
    """
    present = {"/".join(path.split("/")[-3:]) for path in task_files}
    roles = {path.split("/")[0] for path in present}
    apply, skipped = [], []
    for entry in entries:
        problem = _image_role_error(entry, present, roles)
        if problem:
            raise AnsibleFilterError(f"stack_image_roles: {problem}")
        unpinned = unpinned_components(entry, pinned)
        if unpinned:
            skipped.append({**entry, "reason": f"stack pins no {', '.join(unpinned)} for this OS/arch"})
        else:
            apply.append(entry)
    return {"apply": apply, "skipped": skipped}


class FilterModule:
    """trainstack.cluster stack filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "stack_os_id": stack_os_id,
            "stack_versions": stack_versions,
            "stack_components": stack_components,
            "stack_artifacts": stack_artifacts,
            "stack_all_artifacts": stack_all_artifacts,
            "stack_unverified_artifacts": stack_unverified_artifacts,
            "stack_version_matches": stack_version_matches,
            "stack_first_version": stack_first_version,
            "stack_manifest_components": stack_manifest_components,
            "stack_selfcheck_versions": stack_selfcheck_versions,
            "stack_selfcheck_line": stack_selfcheck_line,
            "stack_artifact_path": stack_artifact_path,
            "stack_image_roles": stack_image_roles,
            "stack_environment": stack_environment,
        }
