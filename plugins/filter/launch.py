# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""Filters of the launch layer (module_utils/launch), for the checks that must run where the payload is, and
for an image build that bakes test case environments the launch will find (the same lock and key rules)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.trainstack.cluster.plugins.module_utils.launch import locks, names, output, plan


def close_matches(unknown: Iterable[str], known: Iterable[str], prefix: str = "") -> str:
    """Each unknown name with up to three known names that look like it (see module_utils/launch/names.py)."""
    return names.close_matches(list(unknown), list(known), str(prefix))


def entrypoint_options(help_text: str) -> list[str]:
    """The long options a test case entrypoint's ``--help`` output names."""
    return plan.entrypoint_options(str(help_text))


def partition_nodes(sinfo_lines: Iterable[str], partition: str = "") -> int:
    """The partition's node count from sinfo's '%P %D' lines (see module_utils/launch/output.py)."""
    return output.partition_nodes([str(line) for line in sinfo_lines], str(partition or ""))


def partition_problem(
    sinfo_lines: Iterable[str], sinfo_error: str, nodes: int | str, partition: str = ""
) -> str:
    """Why the partition cannot take the job's nodes, '' when it can (see module_utils/launch/output.py)."""
    try:
        count = int(nodes)
    except (TypeError, ValueError) as err:
        raise AnsibleFilterError(f"partition_problem: nodes must be a whole number, got {nodes!r}") from err
    return output.partition_problem(
        [str(line) for line in sinfo_lines], str(sinfo_error or ""), count, str(partition or "")
    )


def staged_listing(stdout: str) -> dict[str, object]:
    """The marks and recorded options of stage.yml's listing (see module_utils/launch/output.py)."""
    return output.staged_listing(str(stdout))


def rules_refusal(stderr: str) -> str:
    """The reason a test case's argument check gave for refusing a launch."""
    return output.rules_refusal(str(stderr))


def job_attempts(log_text: str) -> list[dict]:
    """Every attempt of a requeued job, read from its log (see module_utils/launch/output.py)."""
    return output.job_attempts(str(log_text))


def duration_seconds(delta: str) -> float:
    """A command's ``delta`` in seconds."""
    return output.duration_seconds(str(delta))


def testcase_names(catalog: str) -> list[str]:
    """The catalog's test cases (``<framework>/<case>``), as the launch lists them."""
    return locks.catalog_testcases(str(catalog))


def testcase_envs(
    catalog: str,
    testcases: Iterable[str],
    os_id: str,
    arch: str,
    stack: Mapping[str, Any],
    python: str,
    root: str = locks.BAKED_ROOT,
    wheelhouse: Iterable[str] | None = None,
) -> dict[str, Any]:
    """The environments an image of ``os_id``/``arch`` bakes for ``testcases`` (module_utils/launch/locks.py):
    the target (the lab's on an OS of the stack's ``scope.lab_os``), ``bake`` (each case with its lock, key
    and path) and ``skipped`` (with the reason)."""
    lab = [str(item) for item in ((stack.get("scope") or {}).get("lab_os") or [])]
    target = locks.image_target(str(os_id), str(arch), lab)
    files = None if wheelhouse is None else [str(item).rsplit("/", 1)[-1] for item in wheelhouse]
    try:
        envs = locks.baked_envs(
            str(catalog), [str(c) for c in testcases], target, str(python), str(root), files
        )
    except ValueError as exc:
        raise AnsibleFilterError(f"testcase_envs: {exc}") from exc
    return {"target": target, **envs}


def testcase_env_check(probe: Mapping[str, Any]) -> dict[str, str]:
    """The self-check of one baked test case environment from its probe (a loop result whose ``item`` is the
    image.json entry): its interpreter must start and, where its lock pins torch, import that version."""
    env = probe.get("item") or {}
    out = str(probe.get("stdout") or "").strip()
    expected = str(env.get("torch") or "")
    check = f"testcase-env:{env.get('case', '?')}"
    if probe.get("rc") != 0:
        error = str(probe.get("stderr") or probe.get("msg") or "").strip().splitlines()
        return {
            "check": check,
            "status": "fail",
            "detail": f"{env.get('path')}: {error[-1] if error else 'failed'}",
        }
    if expected and locks.public_version(out) != expected:
        return {
            "check": check,
            "status": "fail",
            "detail": f"{env.get('path')} has torch {out}, its lock pins {expected}",
        }
    found = f"torch {out}" if expected else "no torch in its lock"
    return {
        "check": check,
        "status": "pass",
        "detail": f"{env.get('path')} ({env.get('lock_name')}, {found})",
    }


class FilterModule:
    """trainstack.cluster launch filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "close_matches": close_matches,
            "entrypoint_options": entrypoint_options,
            "partition_nodes": partition_nodes,
            "partition_problem": partition_problem,
            "rules_refusal": rules_refusal,
            "staged_listing": staged_listing,
            "duration_seconds": duration_seconds,
            "testcase_names": testcase_names,
            "testcase_envs": testcase_envs,
            "testcase_env_check": testcase_env_check,
            "job_attempts": job_attempts,
        }
