# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Filters that read a stack for one host: which versions and which downloads apply to it.

Why filters: roles (NVIDIA, EFA, Slurm...) take their defaults from the stack; a filter keeps the OS/arch
resolution in module_utils/stack_matrix instead of re-implementing `by_os` merging in Jinja.
"""

from __future__ import annotations

import re
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.trainstack.cluster.plugins.module_utils.artifact_fetch import mirror_path
from ansible_collections.trainstack.cluster.plugins.module_utils.stack_matrix import (
    StackError,
    all_artifacts,
    artifacts,
    environment,
    resolve,
    unverified_artifacts,
    version_matches,
    versions,
)
from ansible_collections.trainstack.cluster.plugins.module_utils.stack_resolver import os_id

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


def stack_image_roles(
    entries: list[dict[str, Any]], task_files: list[str], pinned: dict[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    """Split a flavour's role list into what a build applies and what it skips, with the reason.

    A role is applied when its entry point exists (`<role>/tasks/<tasks_from>.yml`, so roles still being
    written are skipped rather than breaking every build) and when the stack pins every component it installs
    for this OS/arch (no NVIDIA driver on the Debian lab image, whose stack scope has none).
    `task_files` are paths ending in '<role>/tasks/<file>.yml'.
    """
    present = {"/".join(path.split("/")[-3:]) for path in task_files}
    apply, skipped = [], []
    for entry in entries:
        entry_point = f"{entry['role']}/tasks/{entry.get('tasks_from', 'main')}.yml"
        unpinned = [c for c in entry.get("components", []) if c not in pinned]
        if entry_point not in present:
            skipped.append({**entry, "reason": f"{entry_point} not in this collection yet"})
        elif unpinned:
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
